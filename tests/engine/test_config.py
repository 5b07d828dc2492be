"""Config: every problem reported at once with key and fix; secrets never in the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import load_config, render_config
from engine.errors import ConfigError


def test_rendered_config_round_trips(tmp_path: Path) -> None:
    text = render_config(bootstrap_servers="127.0.0.1:9092", topics=r"^db\.", target="lake")
    path = tmp_path / "c.toml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.source.kafka.topics == r"^db\."
    assert cfg.target_path() == (tmp_path / "lake").resolve()
    assert cfg.work_path() == (tmp_path / ".cdcctl").resolve()


def test_all_problems_reported_together(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[source]\nbootstrap_servers = "nohost"\ntopics = "(("\nformat = "protobuf"\n'
        "typo = 1\n[hudi]\nnum_buckets = 0\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    keys = {key for key, _, _ in info.value.problems}
    assert keys == {
        "source.bootstrap_servers",
        "source.topics",
        "source.format",
        "source.typo",
        "target",
        "hudi.num_buckets",
    }


def test_secrets_are_refused_in_file_and_read_from_env(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\n'
        '[source.kafka_options]\n"sasl.password" = "hunter2"\n[target]\npath = "l"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "secret" in str(info.value)
    path.write_text(
        '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\nsasl_password_env = "MY_PW"\n'
        '[target]\npath = "l"\n'
    )
    cfg = load_config(path)
    with pytest.raises(ConfigError, match="MY_PW"):
        cfg.source.security.sasl_password_value()
    monkeypatch.setenv("MY_PW", "hunter2")
    secret = load_config(path).source.security.sasl_password_value()
    assert secret is not None and secret.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(load_config(path)) and "hunter2" not in str(secret)


def test_missing_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[source\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_example_config_is_valid() -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "cdcctl.toml")
    assert cfg.source.exclude_tables == ["inventory_audit_*"]
    assert cfg.source.security.sasl_password_value() is None  # only commented out there


def test_errors_tolerance_is_none_by_default_and_checked(tmp_path: Path) -> None:
    base = '[source]\nbootstrap_servers = "h:1"\ntopics = "."\n[target]\npath = "lake"\n'
    path = tmp_path / "c.toml"
    path.write_text(base)
    assert load_config(path).errors.tolerance == "none"
    path.write_text(base + '[errors]\ntolerance = "all"\n')
    assert load_config(path).errors.tolerance == "all"
    path.write_text(base + '[errors]\ntolerance = "some"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [(key, message, _)] = info.value.problems
    assert key == "errors.tolerance" and '"none"' in message and '"all"' in message


def test_max_bad_fraction_is_refused_with_a_pointer_to_errors_tolerance(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[source]\nbootstrap_servers = "h:1"\ntopics = "."\n[target]\npath = "lake"\n'
        "[replicator]\nmax_bad_fraction = 0.05\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [(key, message, fix)] = info.value.problems
    assert key == "replicator.max_bad_fraction"
    assert "errors.tolerance" in message and "tolerance" in fix


def test_retry_max_seconds_defaults_to_600_and_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    base = '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\n[target]\npath = "l"\n'
    path.write_text(base)
    assert load_config(path).replicator.retry_max_seconds == 600
    path.write_text(base + "[replicator]\nretry_max_seconds = 0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [key for key, _, _ in info.value.problems] == ["replicator.retry_max_seconds"]


def test_tls_keys_map_to_librdkafka_and_the_key_password_comes_from_env(
    tmp_path: Path, monkeypatch
) -> None:
    from engine.source.kafka import consumer_settings

    path = tmp_path / "c.toml"
    base = '[source]\nbootstrap_servers = "h:1"\ntopics = "x"\n'
    path.write_text(
        base + 'security_protocol = "SSL"\nssl_ca_location = "ca.pem"\n'
        'ssl_certificate_location = "me.pem"\nssl_key_location = "me.key"\n'
        'ssl_key_password_env = "KEY_PW"\n[target]\npath = "l"\n'
    )
    cfg = load_config(path)
    with pytest.raises(ConfigError, match="KEY_PW"):
        consumer_settings(cfg.source, 10)
    monkeypatch.setenv("KEY_PW", "s3cret")
    settings = consumer_settings(cfg.source, 10)
    assert settings["security.protocol"] == "SSL"
    assert settings["ssl.ca.location"] == "ca.pem"
    assert settings["ssl.certificate.location"] == "me.pem"
    assert settings["ssl.key.location"] == "me.key"
    assert settings["ssl.key.password"] == "s3cret"
    assert settings["ssl.endpoint.identification.algorithm"] == "https"  # on by default
    assert "s3cret" not in repr(cfg)

    path.write_text(
        base + 'security_protocol = "SASL_SSL"\nssl_endpoint_identification = false\n'
        '[target]\npath = "l"\n'
    )
    settings = consumer_settings(load_config(path).source, 10)
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert "ssl.ca.location" not in settings  # the system's CA store
    path.write_text(base + '[target]\npath = "l"\n')
    assert not [k for k in consumer_settings(load_config(path).source, 10) if "ssl" in k]


def _secret_config(path: Path, lines: str) -> Path:
    path.write_text(
        f'[source]\nbootstrap_servers = "h:1"\ntopics = "x"\n{lines}\n[target]\npath = "l"\n'
    )
    return path


def test_secret_references_resolve_from_env_and_file(tmp_path: Path, monkeypatch) -> None:
    from engine.redaction import redact

    secret_file = tmp_path / "kafka.pw"
    secret_file.write_text("file-secret-9f3k\n")
    monkeypatch.setenv("DB_PW_T", "env-secret-7c2q")
    cfg = load_config(
        _secret_config(
            tmp_path / "c.toml",
            f'sasl_password = "${{file:{secret_file}}}"\n'
            'database_password = "${env:DB_PW_T}"\nssl_key_password = "${env:DB_PW_T}"',
        )
    )
    sasl = cfg.source.security.sasl_password_value()
    assert sasl is not None and sasl.get_secret_value() == "file-secret-9f3k"
    db = cfg.source.database.database_password_value()
    assert db is not None and db.get_secret_value() == "env-secret-7c2q"
    key = cfg.source.security.ssl_key_password_value()
    assert key is not None and key.get_secret_value() == "env-secret-7c2q"
    # Resolved secrets are registered for redaction; the config never shows them.
    assert redact("login failed for env-secret-7c2q") == "login failed for ***"
    assert "file-secret-9f3k" not in repr(cfg) and "env-secret-7c2q" not in repr(cfg)
    # A relative ${file:...} is relative to the config file's folder, not the cwd.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "db.pw").write_text("relative-secret-4d8z")
    monkeypatch.chdir(tmp_path / "sub")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "db.pw").write_text("conf-relative-5h1w\n")
    cfg = load_config(
        _secret_config(tmp_path / "conf" / "c.toml", 'database_password = "${file:db.pw}"')
    )
    db = cfg.source.database.database_password_value()
    assert db is not None and db.get_secret_value() == "conf-relative-5h1w"


def test_secret_literal_refused_naming_key_and_fix(tmp_path: Path) -> None:
    path = _secret_config(tmp_path / "c.toml", 'database_password = "hunter2-literal"')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (key, msg, _fix), *_ = info.value.problems
    assert key == "source.database_password"
    assert "${env:NAME}" in msg and "${file:PATH}" in msg
    assert "hunter2-literal" not in str(info.value) + repr(info.value.problems)


def test_secret_reference_missing_env_or_file_is_clear(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("NO_SUCH_PW_T", raising=False)
    path = _secret_config(tmp_path / "c.toml", 'sasl_password = "${env:NO_SUCH_PW_T}"')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    # Reported as one of the config's problems (with any others), key and reference named.
    assert info.value.problems == [
        (
            "source.sasl_password = ${env:NO_SUCH_PW_T}",
            "environment variable NO_SUCH_PW_T is not set",
            "export NO_SUCH_PW_T=... before running cdcctl, or change source.sasl_password",
        )
    ]
    assert (
        "source.sasl_password = ${env:NO_SUCH_PW_T}: environment variable NO_SUCH_PW_T is not set"
        in str(info.value)
    )
    missing = tmp_path / "nope.pw"
    path = _secret_config(tmp_path / "c.toml", f'ssl_key_password = "${{file:{missing}}}"')
    with pytest.raises(ConfigError, match=r"source.ssl_key_password = .*cannot read .*nope.pw"):
        load_config(path)


def test_secret_reference_and_older_key_together_refused(tmp_path: Path) -> None:
    path = _secret_config(
        tmp_path / "c.toml", 'sasl_password = "${env:A_T}"\nsasl_password_env = "A_T"'
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "keep one" in repr(info.value.problems)


@pytest.mark.parametrize("table", [{"keyless": "full-row"}, {"key_fields": ["a"]}])
def test_json_only_table_settings_are_refused_with_avro(tmp_path: Path, table: dict) -> None:
    from engine.config import config_from_dict

    key = next(iter(table))
    base = {
        "source": {"bootstrap_servers": "h:1", "topics": ".", "format": "debezium-avro"},
        "target": {"path": str(tmp_path)},
    }
    base["source"]["schema_registry"] = {"url": "http://registry:8081"}  # type: ignore[index]
    config_from_dict(base)  # accepted without the table setting
    # Column type hints apply to Avro as well (tests/cases/debezium-avro/types-*.json).
    config_from_dict({**base, "tables": {"app_t": {"columns": {"a": "date"}}}})
    with pytest.raises(ConfigError) as err:
        config_from_dict({**base, "tables": {"app_t": table}})
    assert f"tables.app_t.{key} is not read with format" in str(err.value)


def _s3_config(tmp_path: Path, target: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        '[source]\nbootstrap_servers = "127.0.0.1:9092"\ntopics = "x"\n' + target.strip() + "\n"
    )
    return path


def test_object_storage_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCCTL_TEST_KEY_ID", "AKIA-cdcctl-test")
    (tmp_path / "secret").write_text("cdcctl-secret-in-a-file\n")
    path = _s3_config(
        tmp_path,
        """
[target]
path = "s3://lake/replicas/"
[target.s3]
endpoint = "http://127.0.0.1:9000"
path_style = true
access_key_id = "${env:CDCCTL_TEST_KEY_ID}"
secret_access_key = "${file:secret}"
""",
    )
    cfg = load_config(path)
    assert cfg.target_on_object_storage()
    s3 = cfg.target_s3()
    assert (s3.url, s3.endpoint, s3.path_style) == (
        "s3://lake/replicas/",
        "http://127.0.0.1:9000",
        True,
    )
    assert s3.access_key_id is not None and s3.secret_access_key is not None
    # A relative secret file is read from beside the config, like every path in it.
    assert s3.secret_access_key.get_secret_value() == "cdcctl-secret-in-a-file"
    assert "cdcctl-secret" not in repr(s3)
    with pytest.raises(ConfigError, match="is on object storage, and this needs a folder") as info:
        cfg.target_path()
    assert "set target.path to a folder" in info.value.hint
    # Nothing named "s3:" was created as if it were a folder.
    assert not (tmp_path / "s3:").exists()


@pytest.mark.parametrize(
    ("target", "key", "says"),
    [
        ('path = "gs://lake/x"', "target.path", "a folder or an s3://bucket/prefix URL"),
        ('path = "s3://lake/a/../b"', "target.path", "is not s3://BUCKET/PREFIX"),
        ('path = "s3:///x"', "target.path", "is not s3://BUCKET/PREFIX"),
        ('path = "lake"\n[target.s3]\nregion = "eu-west-1"', "target", "is a folder"),
        (
            'path = "s3://lake"\n[target.s3]\naccess_key_id = "${env:A}"\n'
            'secret_access_key = "plain-text"',
            "target.s3.secret_access_key",
            "must not be in the file",
        ),
        (
            'path = "s3://lake"\n[target.s3]\naccess_key_id = "${env:A}"',
            "target.s3",
            "go together",
        ),
        (
            'path = "s3://AKIAKEY:cdcctl-secret-in-url@lake/x"',
            "target.path",
            "credentials must not be in target.path",
        ),
        (
            'path = "s3://lake"\n[replicator]\nwork_dir = "s3://lake/work"',
            "replicator.work_dir",
            "the work folder is local",
        ),
        (
            'path = "s3://lake"\n[target.s3]\nendpoint = "http://k:s@minio:9000"',
            "target.s3.endpoint",
            "credentials must not be in the URL",
        ),
    ],
)
def test_object_storage_target_refused(tmp_path: Path, target: str, key: str, says: str) -> None:
    path = _s3_config(tmp_path, "[target]\n" + target)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = {k: message for k, message, _ in info.value.problems}
    assert key in problems and says in problems[key], problems
    assert "cdcctl-secret-in-url" not in str(info.value)
