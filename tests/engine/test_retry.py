"""The retry rule: what is transient, how long each wait is, when an incident is given up."""

from __future__ import annotations

import errno
import random

import pytest

from engine.errors import ConfigError, SchemaEvolutionError, SourceError, SparkJobError
from engine.replicator.retry import BASE_S, CAP_S, Incident, backoff, transient_cause


def test_waits_double_from_one_second_up_to_the_cap_with_jitter() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(CAP_S, BASE_S * 2 ** (attempt - 1))
        waits = [backoff(attempt, rng) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert max(waits) - min(waits) > ceiling / 4  # jittered, not one fixed value
    assert backoff(1000, rng) <= CAP_S


def test_transient_and_terminal_failures() -> None:
    assert transient_cause(SourceError("cannot reach Kafka at h:1")) == "cannot reach Kafka at h:1"
    assert transient_cause(SparkJobError("the Spark job of batch 3 failed: x")) is not None
    disk = OSError(errno.EIO, "Input/output error", "/lake/t/.hoodie/x.commit")
    assert transient_cause(disk) == (
        "storage error on /lake/t/.hoodie/x.commit: Input/output error; an I/O error: check "
        "the disk (dmesg); each table resumes from its last commit"
    )
    assert transient_cause(SchemaEvolutionError("qty int32 -> string")) is None
    assert transient_cause(ConfigError("bad")) is None
    assert transient_cause(ValueError("a bug")) is None


def test_an_incident_stops_waiting_at_its_limit() -> None:
    incident = Incident.begin("cannot reach Kafka at h:1")
    wait = incident.next_wait(0.2)
    assert wait is not None and wait <= 0.2  # never longer than what is left
    incident.started -= 5.0  # 5 s into the incident
    assert incident.next_wait(3.0) is None
    message = incident.given_up(3.0)
    assert message.startswith("cannot reach Kafka at h:1 (retried 1 time(s) over 5 s;")
    assert message.endswith("replicator.retry_max_seconds = 3)")


def test_a_terminal_engine_error_inside_a_spark_task_is_not_retried() -> None:
    from engine.errors import HudiError
    from engine.replicator.retry import task_error

    text = (
        "An error occurred while calling o1.collect.\n: org.apache.spark.SparkException: "
        'Job aborted ...\n  File "/x/engine/hudi/tombstones.py", line 64, in read\n'
        "engine.errors.HudiError: the tombstone sidecar /l/t/x.parquet is unreadable (bad)\n"
        "  hint: rebuild the table from its topic\n SQLSTATE: 38000\n\tat org.apache..."
    )
    found = task_error(RuntimeError(text))
    assert isinstance(found, HudiError)
    assert found.message == "the tombstone sidecar /l/t/x.parquet is unreadable (bad)"
    assert found.hint == "rebuild the table from its topic"
    crashed = "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)"
    assert task_error(RuntimeError(crashed)) is None
    assert task_error(RuntimeError("engine.errors.SourceError: Kafka")) is None  # transient


def test_storage_errors_say_what_to_do_also_from_inside_a_spark_task() -> None:
    from engine.replicator.retry import storage_cause, task_storage_error

    full = OSError(errno.ENOSPC, "No space left on device", "/lake/t/x.parquet")
    assert storage_cause(full) == (
        "storage error on /lake/t/x.parquet: No space left on device; the file system is "
        "full: free space on it (or move target.path or replicator.work_dir, whichever it "
        "holds, to a larger one); each table resumes from its last "
        "commit, nothing is lost"
    )
    read_only = OSError(errno.EROFS, "Read-only file system", "/lake/t/.hoodie/1.commit")
    assert "remount it read-write" in storage_cause(read_only)
    # The Python traceback travels inside the Java exception of the failed job.
    text = (
        "An error occurred while calling o1.collect.\n: org.apache.spark.SparkException: "
        'Job aborted ...\n  File "/x/engine/hudi/file_slice.py", line 9, in write\n'
        "OSError: [Errno 28] No space left on device: '/lake/t/a_1-1-0_2.parquet'\n"
        "\tat org.apache.spark.api.python..."
    )
    found = task_storage_error(RuntimeError(text))
    assert found is not None
    assert (found.errno, found.filename) == (errno.ENOSPC, "/lake/t/a_1-1-0_2.parquet")
    assert task_storage_error(RuntimeError("ValueError: [Errno 2] nope")) is None  # ENOENT
    crashed = "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)"
    assert task_storage_error(RuntimeError(crashed)) is None


def test_a_stop_forgives_only_a_failed_spark_job_of_the_batch_in_flight(tmp_path) -> None:
    """As the run stops, the batch in flight whose Spark job failed (a service manager's
    stop also ended Spark's Python workers) is left to the next start; a Kafka failure or a
    storage error then is not the stop's doing: it is raised and fails the run."""
    from engine.config import config_from_dict
    from engine.replicator.loop import Replicator
    from engine.replicator.retry import job_error, lost_to_a_stop

    crashed = job_error(RuntimeError("Python worker exited unexpectedly (crashed)"), 4, "log")
    task_disk = job_error(RuntimeError("OSError: [Errno 5] Input/output error: '/x'"), 4, "log")
    kafka = SourceError("cannot reach Kafka at h:1")
    disk = OSError(errno.EIO, "Input/output error", "/lake/t/.hoodie/x.commit")
    assert lost_to_a_stop(crashed)
    assert not any(lost_to_a_stop(e) for e in (task_disk, kafka, disk))

    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "localhost:9092", "topics": r"^db\."},
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    replicator = Replicator(cfg)
    replicator.request_stop()
    for failure in (crashed, task_disk, kafka, disk):

        def settle(failure: BaseException = failure) -> bool:
            raise failure

        replicator._settle = settle  # type: ignore[method-assign]
        if failure is crashed:
            replicator._settle_last()  # left to the next start
            replicator.recovery.retry(transient_cause(failure) or "", failure)
            continue
        with pytest.raises(type(failure)):
            replicator._settle_last()
        with pytest.raises(type(failure)):
            replicator.recovery.retry(transient_cause(failure) or "", failure)
