"""Tests of engine.hudi.bucket_index: Java-compatible bucket hashing and file ids."""

from __future__ import annotations

import base64
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import HudiError
from engine.hudi.bucket_index import (
    bucket_file_id,
    bucket_id,
    bucket_ids,
    bucket_of_file_id,
    hash_values,
    java_string_hash,
)

# java.lang.String.hashCode values. Sources:
# - "" -> 0 and the formula s[0]*31^(n-1) + ... + s[n-1] are from the JDK javadoc of
#   String.hashCode; the single-character values follow from it directly.
# - "hello" -> 99162322 and "Aa" == "BB" == 2112 are the textbook examples of that
#   formula (the latter the classic hash collision).
# - "polygenelubricants" -> Integer.MIN_VALUE is the well-known string whose hash is
#   -2^31 (it exercises the int32 wrap and the & 0x7FFFFFFF in the bucket formula).
# - "é" (U+00E9) -> 233 and "😀" (U+1F600 = surrogates D83D DE00) ->
#   31*0xD83D + 0xDE00 = 1772899 apply the javadoc formula to UTF-16 code units.
# All of them were also printed by OpenJDK 17's String.hashCode when these tests were
# written; test_matches_a_real_jvm below repeats such a check wherever `java` exists.
STRING_HASHES = [
    ("", 0),
    ("a", 97),
    ("5", 53),
    ("Aa", 2112),
    ("BB", 2112),
    ("hello", 99162322),
    ("polygenelubricants", -(2**31)),
    ("é", 233),
    ("😀", 1772899),
]

# Bucket numbers asserted by Hudi's own tests: apache/hudi, file
#   hudi-spark-datasource/hudi-spark/src/test/scala/
#   org/apache/spark/sql/hudi/TestBucketIndexSupport.scala
# with bucketNumber = 19.
# - "Test Single Hash Fields Expression": NonpartitionedKeyGenerator on field A, keys
#   "1".."5" -> `assert(bucket1Id4 == 4 && bucket2Id5 == 5 && bucket3Id6 == 6 &&
#   bucket4Id7 == 7 && bucket5Id8 == 8)`.
# - "Test Multiple HashFields Expression" (NonpartitionedKeyGenerator) and "... With
#   ComplexKey" (ComplexKeyGenerator), record key fields A,B, so the keys are
#   "A:1,B:2" .. "A:5,B:6" -> `assert(bucket1Id4 == 3 && bucket2Id5 == 16 &&
#   bucket3Id6 == 10 && bucket4Id7 == 4 && bucket5Id8 == 17)`.
# Plus the worked example of docs/hudi-format.md 8.2: key "5", 4 buckets -> bucket 0.
HUDI_BUCKETS = [
    ("1", 19, 4),
    ("2", 19, 5),
    ("3", 19, 6),
    ("4", 19, 7),
    ("5", 19, 8),
    ("A:1,B:2", 19, 3),
    ("A:2,B:3", 19, 16),
    ("A:3,B:4", 19, 10),
    ("A:4,B:5", 19, 4),
    ("A:5,B:6", 19, 17),
    ("5", 4, 0),
]


@pytest.mark.parametrize(("text", "expected"), STRING_HASHES)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@pytest.mark.parametrize(("key", "num_buckets", "expected"), HUDI_BUCKETS)
def test_bucket_id_matches_hudi_tests(key: str, num_buckets: int, expected: int) -> None:
    assert bucket_id(key, num_buckets) == expected


def test_bucket_ids_matches_hudi_tests() -> None:
    for n in {n for _, n, _ in HUDI_BUCKETS}:
        cases = [(k, e) for k, nb, e in HUDI_BUCKETS if nb == n]
        got = bucket_ids(pa.array([k for k, _ in cases]), n)
        assert got.tolist() == [e for _, e in cases]


def test_min_value_hash_is_masked() -> None:
    # List hash of ["polygenelubricants"] = 31 + MIN_VALUE; the mask keeps it positive.
    assert bucket_id("polygenelubricants", 7) == ((31 - 2**31) & 0x7FFFFFFF) % 7


def test_hash_values() -> None:
    assert hash_values("abc") == ["abc"]
    assert hash_values("") == [""]
    assert hash_values("f1:abc,f2:bcd", ["f1", "f2"]) == ["abc", "bcd"]
    assert hash_values("f1:abc,f2:bcd", ["f2", "f1"]) == ["bcd", "abc"]
    # A simple key with ':' is a map {"10": "30"} to Java; the key field is not in it.
    assert hash_values("10:30", ["id"]) == [None]
    assert hash_values("id:30", ["id"]) == ["30"]
    assert hash_values("a:b:c", ["a"]) == ["b"]  # Java keeps p[1] of ["a", "b", "c"]
    # Where Java throws (no value, a field twice) the legacy reading is used.
    assert hash_values("id:", ["id"]) == [""]
    assert hash_values("id:1,id:2", ["id"]) == ["1", "2"]
    assert hash_values("10:30", ["id"], rule="legacy") == ["30"]


def test_tables_keep_their_hashing_rule(tmp_path: Path) -> None:
    from engine.hudi import HudiWriter
    from engine.hudi import options as o

    schema = pa.schema([("id", pa.string()), ("_cdc_pos", pa.int64())])
    writer = HudiWriter.create(
        tmp_path / "t",
        name="t",
        record_key_fields=["id"],
        ordering_field="_cdc_pos",
        num_buckets=16,
        schema=schema,
        table_type="MERGE_ON_READ",
    )
    keys = pa.array(["10:30", "10:31", "x"])
    assert writer._table.properties[o.BUCKET_HASH_RULE_KEY] == "java"
    assert writer.bucket_ids(keys).tolist() == [31 % 16, 31 % 16, bucket_id("x", 16)]
    # A table created before the rule existed has no key: it keeps hashing as it did.
    props = tmp_path / "t" / ".hoodie" / "hoodie.properties"
    text = props.read_text()
    props.write_text("".join(x for x in text.splitlines(True) if "hash.rule" not in x))
    legacy = HudiWriter.open(tmp_path / "t")
    assert legacy.bucket_ids(keys).tolist() == [
        bucket_id(k, 16, ["id"], "legacy") for k in ["10:30", "10:31", "x"]
    ]
    assert legacy.bucket_ids(keys).tolist()[0] != 31 % 16


def test_bucket_ids_shapes_and_offsets() -> None:
    keys = ["", "a", "bb", "", "é", "x:1,y:2", "😀", "12345", ""]
    expected = [bucket_id(k, 13) for k in keys]
    arr = pa.array(keys)
    assert bucket_ids(arr, 13).tolist() == expected
    assert bucket_ids(arr.slice(2, 5), 13).tolist() == expected[2:7]  # non-zero offset
    assert bucket_ids(pa.array(keys, pa.large_string()), 13).tolist() == expected
    chunked = pa.chunked_array([keys[:4], keys[4:], []], pa.string())
    assert bucket_ids(chunked, 13).tolist() == expected
    assert bucket_ids(pa.array(["", ""]), 13).tolist() == [31 % 13] * 2
    # Total bytes == first length * count although the lengths differ (found by hypothesis).
    tricky = ["ab", "", "abcd"]
    assert bucket_ids(pa.array(tricky), 13).tolist() == [bucket_id(k, 13) for k in tricky]
    result = bucket_ids(pa.array([], pa.string()), 13)
    assert result.dtype == np.int32 and len(result) == 0


def test_bucket_ids_rejects_nulls() -> None:
    with pytest.raises(HudiError):
        bucket_ids(pa.array(["a", None]), 4)


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(
        st.one_of(
            st.text(),  # any Unicode incl. astral characters and the empty string
            st.text(alphabet=st.characters(max_codepoint=127)),
            st.from_regex(r"[a-z]{1,3}:[^,:]{0,4}(,[a-z]{1,3}:[^,:]{0,4}){0,2}", fullmatch=True),
        ),
        max_size=40,
    ),
    num_buckets=st.integers(min_value=1, max_value=1024),
    offset=st.integers(min_value=0, max_value=3),
)
def test_vectorised_equals_scalar(keys: list[str], num_buckets: int, offset: int) -> None:
    arr = pa.array(["pad"] * offset + keys, pa.string()).slice(offset)
    assert bucket_ids(arr, num_buckets).tolist() == [bucket_id(k, num_buckets) for k in keys]


def test_bucket_ids_vectorised_equals_scalar_on_a_million_keys() -> None:
    # Correctness only: how fast it is belongs to bench/, never to a timed test.
    keys = pa.array([f"{i:08x}-order-{i * 7919}" for i in range(1_000_000)])
    result = bucket_ids(keys, 256)
    sample = range(0, 1_000_000, 9973)
    assert [result[i] for i in sample] == [bucket_id(keys[i].as_py(), 256) for i in sample]


def test_bucket_file_id_roundtrip() -> None:
    for bucket in (0, 3, 255, 12345678):
        file_id = bucket_file_id(bucket)
        assert re.fullmatch(r"\d{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-0", file_id)
        assert file_id.startswith(f"{bucket:08d}-")
        assert bucket_of_file_id(file_id) == bucket
    assert bucket_file_id(3) != bucket_file_id(3)
    assert bucket_of_file_id("00000003-4a1e-4c2b-9f3d-2b6c8e0a1f55-0") == 3


def test_bucket_of_non_bucket_file_id() -> None:
    with pytest.raises(HudiError):
        bucket_of_file_id("a079bdb3-731c-4894-b855-abfcd6921007-0")
    with pytest.raises(HudiError):
        bucket_file_id(10**8)


# Java's own String.hashCode and List.hashCode, run on a real JVM when one is installed.
_JAVA_HASHER = """
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

public class Hasher {
  public static void main(String[] args) throws Exception {
    for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
      String key = new String(Base64.getDecoder().decode(line), StandardCharsets.UTF_8);
      int bucket = (Collections.singletonList(key).hashCode() & Integer.MAX_VALUE) % 97;
      System.out.println(key.hashCode() + " " + bucket);
    }
  }
}
"""


# Hudi 0.14/0.15's BucketIdentifier.getHashKeys, line for line in its Java semantics
# (String.split, Collectors.toMap, List.hashCode with nulls); "ERR" where Java throws.
_JAVA_HASH_KEYS = """
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.stream.*;

public class HashKeys {
  public static void main(String[] args) throws Exception {
    List<String> fields = Arrays.asList(args[1].split(","));
    for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
      String key = new String(Base64.getDecoder().decode(line), StandardCharsets.UTF_8);
      try {
        List<String> hashKeys;
        if (!key.contains(":")) {
          hashKeys = Collections.singletonList(key);
        } else {
          Map<String, String> pairs = Arrays.stream(key.split(","))
              .map(p -> p.split(":"))
              .collect(Collectors.toMap(p -> p[0], p -> p[1]));
          hashKeys = fields.stream().map(pairs::get).collect(Collectors.toList());
        }
        System.out.println((hashKeys.hashCode() & Integer.MAX_VALUE) % 97);
      } catch (RuntimeException e) {
        System.out.println("ERR");
      }
    }
  }
}
"""


def test_keys_with_colons_match_hudis_java_rule(tmp_path: Path) -> None:
    rng = random.Random(11)
    chars = "ab1é:,"

    def value() -> str:
        return "".join(rng.choice(chars) for _ in range(rng.randrange(0, 6)))

    def pairs() -> str:
        names = rng.sample(["id", "k2", "x", ""], rng.randrange(1, 4))
        return ",".join(f"{n}:{value()}" for n in names)

    keys = ["10:30", "id:5", "id:5,k2:x", "k2:x,id:5", "id:", ":5", "id:1,id:2", "id:a:b"]
    keys += [rng.choice([pairs, value])() for _ in range(800)]
    keys = [k for k in keys if ":" in k]
    (tmp_path / "HashKeys.java").write_text(_JAVA_HASH_KEYS)
    (tmp_path / "keys.txt").write_text(
        "".join(base64.b64encode(k.encode()).decode() + "\n" for k in keys)
    )
    for fields in (["id"], ["id", "k2"]):
        run = subprocess.run(
            ["java", str(tmp_path / "HashKeys.java"), str(tmp_path / "keys.txt"), ",".join(fields)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        java = run.stdout.split()
        assert len(java) == len(keys) and "ERR" in java  # and some Java cannot hash
        ours = bucket_ids(pa.array(keys), 97, fields).tolist()
        comparable = [
            (k, int(j), b) for k, j, b in zip(keys, java, ours, strict=True) if j != "ERR"
        ]
        assert len(comparable) > 150  # keys Java can hash, with and without the fields
        assert len({j for _, j, _ in comparable}) > 20
        assert [(k, j) for k, j, _ in comparable] == [(k, b) for k, _, b in comparable]
        assert ours == [bucket_id(k, 97, fields) for k in keys]


def test_matches_a_real_jvm(tmp_path: Path) -> None:
    assert shutil.which("java"), "no java on PATH: run ./bootstrap.sh test (it installs Java 17)"
    rng = random.Random(7)

    def char() -> str:
        lo, hi = rng.choice([(32, 127), (128, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)])
        return chr(rng.randrange(lo, hi))

    keys = ["", "hello", "😀"] + [
        "".join(char() for _ in range(rng.randrange(20))) for _ in range(300)
    ]
    keys = [k for k in keys if ":" not in k]  # simple keys: the list holds the key itself
    (tmp_path / "Hasher.java").write_text(_JAVA_HASHER)
    (tmp_path / "keys.txt").write_text(
        "".join(base64.b64encode(k.encode()).decode() + "\n" for k in keys)
    )
    run = subprocess.run(
        ["java", str(tmp_path / "Hasher.java"), str(tmp_path / "keys.txt")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    java = [tuple(map(int, line.split())) for line in run.stdout.splitlines()]
    assert java == [(java_string_hash(k), bucket_id(k, 97)) for k in keys]
    assert bucket_ids(pa.array(keys), 97).tolist() == [b for _, b in java]
