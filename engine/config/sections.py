"""The sections after ``[source]``: ``[target]``, ``[hudi]``, ``[replicator]``,
``[errors]``, ``[spark]``."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from engine.config.base import Section, http_url, init
from engine.config.references import REFERENCE_DOC, TARGET_SECRETS, reference_only
from engine.naming import DEFAULT_NAMING, check_naming
from engine.storage import is_object_url, split_url

#: The log file's name in the work folder (rotated files add ``.1``, ``.2``, ...).
LOG_NAME = "cdcctl.log"

#: ``hudi.clean_retain_hours`` by default: longer than queries on a replica run and than
#: an hourly incremental pull's interval, short enough that the active timeline (every
#: commit of the window stays on it) and the slices compactions replaced stay small at
#: one commit a second (3,600 instants). Hudi's own default for the policy is 24.
DEFAULT_CLEAN_RETAIN_HOURS = 1.0

#: What ``errors.tolerance`` may be.
TOLERANCES = ("none", "all")


class S3Config(Section):
    """``[target.s3]``: how to reach an ``s3://`` target (S3 or an S3-compatible store).
    Credentials are references or the standard AWS environment, never literals."""

    endpoint: str | None = Field(
        default=None,
        description="an S3-compatible server, `http://minio:9000` or `https://...`; unset: "
        "AWS S3 in `region`",
    )
    region: str | None = Field(
        default=None,
        description="the bucket's region; unset: `AWS_REGION` / `AWS_DEFAULT_REGION`, else "
        "`us-east-1`",
    )
    path_style: bool = Field(
        default=False,
        description="path-style requests (`endpoint/bucket/key`: MinIO and most self-hosted "
        "stores) instead of virtual-hosted (`bucket.endpoint/key`)",
    )
    access_key_id: str | None = Field(
        default=None,
        description=f"the access key id, {REFERENCE_DOC}; unset with the two below: the AWS "
        "environment (`AWS_ACCESS_KEY_ID`, web identity, instance metadata)",
    )
    secret_access_key: str | None = Field(
        default=None, description=f"the secret access key, {REFERENCE_DOC}"
    )
    session_token: str | None = Field(
        default=None, description=f"a session token (temporary credentials), {REFERENCE_DOC}"
    )

    _reference = field_validator(*TARGET_SECRETS)(reference_only)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = http_url(value)
        if parts.password is not None or parts.username is not None:
            raise ValueError(
                "credentials must not be in the URL: use access_key_id and "
                "secret_access_key references"
            )
        return value

    @model_validator(mode="after")
    def _key_pair(self) -> S3Config:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key go together: set both")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("session_token needs access_key_id and secret_access_key")
        return self


class TargetConfig(Section):
    """Where the replicas go: a folder, or an ``s3://`` bucket and prefix, holding one
    Hudi table per source table."""

    path: str = Field(
        min_length=1,
        description="folder holding one Hudi table per source table, or `s3://bucket/prefix` "
        "(object storage, with `[target.s3]`; see [Object storage](tables.md#object-storage))",
        json_schema_extra=init("one Hudi table per source table is created under this folder"),
    )
    s3: S3Config | None = Field(
        default=None,
        description="endpoint, region and credentials of an `s3://` target",
        json_schema_extra={"shown_default": "unset"},
    )
    table_naming: str = Field(
        default=DEFAULT_NAMING,
        description="how a topic names its table: `schema_table` (`inventory_customers`), "
        "`prefix_schema_table` (`dbserver1_inventory_customers`), or a template over "
        "`{prefix}`, `{database}`, `{schema}`, `{table}` (see "
        "[Table naming](tables.md#table-naming))",
    )

    @field_validator("table_naming")
    @classmethod
    def _naming(cls, value: str) -> str:
        return check_naming(value)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if is_object_url(value):
            if "@" in value.split("/", 3)[2]:
                raise ValueError(
                    "credentials must not be in target.path: set [target.s3] access_key_id "
                    "and secret_access_key as references"
                )
            try:
                split_url(value)
            except ValueError:
                raise ValueError(
                    f"{value!r} is not s3://BUCKET/PREFIX (a prefix without empty, `.` or "
                    "`..` parts)"
                ) from None
        elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
            raise ValueError(f"{value!r}: a folder or an s3://bucket/prefix URL")
        return value

    @model_validator(mode="after")
    def _s3_settings(self) -> TargetConfig:
        if self.s3 is not None and not is_object_url(self.path):
            raise ValueError("[target.s3] is set but target.path is a folder, not s3://...")
        return self


class HudiConfig(Section):
    """Hudi writer settings. ``num_buckets`` and ``table_type`` are fixed for a table once
    it exists."""

    num_buckets: int = Field(
        default=8,
        ge=1,
        le=4096,
        description="bucket index size of new tables (fixed for a table once created)",
        json_schema_extra=init("bucket index size per table; fixed once a table exists"),
    )
    clean_retain_hours: float = Field(
        default=DEFAULT_CLEAN_RETAIN_HOURS,
        gt=0,
        description="cleaning by time (Hudi's `KEEP_LATEST_BY_HOURS`, "
        "`hoodie.cleaner.hours.retained`): every instant of the last N hours stays readable "
        "(time travel, incremental pulls, and a query pinned at an instant keeps its files this "
        "long after it, however many commits and compactions follow); file slices no such "
        "instant needs are cleaned. An hour outlasts queries and hourly pulls while the active "
        "timeline stays small at one commit a second; Hudi's default for this policy is 24. "
        "Fractions work (`0.25`)",
        json_schema_extra=init(
            "history kept readable (time travel, incremental pulls, long queries)"
        ),
    )
    clean_retain_commits: int | None = Field(
        default=None,
        ge=1,
        description="cleaning by count instead (Hudi's `KEEP_LATEST_COMMITS`, "
        "`hoodie.cleaner.commits.retained`): the newest N commits stay readable, seconds of "
        "history on a busy table (a start warns). Set it or `clean_retain_hours`, not both; "
        "older configs (`cdcctl init` wrote `clean_retain_commits = 10`) keep working: remove "
        "the line to retain by time",
    )
    table_type: Literal["MERGE_ON_READ", "COPY_ON_WRITE"] = Field(
        default="MERGE_ON_READ",
        description="for new tables: `MERGE_ON_READ` (a batch appends one log file per touched "
        "file group, compacted into a new base file when its logs grow; see "
        "[Tables](tables.md#tables)) or `COPY_ON_WRITE` (a batch rewrites every file group it "
        "touches). An existing table keeps its type",
        json_schema_extra=init("or COPY_ON_WRITE; fixed once a table exists"),
    )
    compaction_max_log_files: int = Field(
        default=16,
        ge=1,
        description="(MOR) a file group whose slice has this many log files is due for "
        "compaction (a batch compacts at most a quarter of a table's groups, fullest first; at "
        "twice this many it is compacted regardless)",
    )
    compaction_max_log_ratio: float = Field(
        default=0.5,
        gt=0,
        description="(MOR) ...or whose log files add up to more than this fraction of its base "
        "file (base files under 4 MiB count as 4 MiB)",
    )
    keep_min_commits: int = Field(
        default=20,
        ge=2,
        description="archiving (Hudi's `hoodie.keep.min.commits`): this many completed commits "
        "stay on the active timeline, and every commit the cleaning policy retains; with "
        "`clean_retain_commits`, must exceed it",
    )
    keep_max_commits: int = Field(
        default=30,
        ge=3,
        description="archiving (Hudi's `hoodie.keep.max.commits`): past this many completed "
        "commits, the oldest move to the archived timeline; must exceed `keep_min_commits`",
    )
    archive_retention_hours: float = Field(
        default=0.0,
        ge=0,
        description="`0`: archive files are kept forever, as Hudi keeps them (its archived "
        "timeline and incremental queries from archived instants read them); otherwise archive "
        "files whose newest instant is older are deleted (at least `clean_retain_hours`)",
    )

    @model_validator(mode="after")
    def _archiving(self) -> HudiConfig:
        if self.keep_min_commits >= self.keep_max_commits:
            raise ValueError(
                f"keep_min_commits ({self.keep_min_commits}) must be less than "
                f"keep_max_commits ({self.keep_max_commits})"
            )
        if self.clean_retain_commits is not None:
            if "clean_retain_hours" in self.model_fields_set:
                raise ValueError(
                    "set clean_retain_hours (retain by time) or clean_retain_commits (by "
                    "count), not both"
                )
            if self.keep_min_commits <= self.clean_retain_commits:
                raise ValueError(
                    f"keep_min_commits ({self.keep_min_commits}) must be greater than "
                    f"clean_retain_commits ({self.clean_retain_commits}), as Hudi requires"
                )
        elif 0 < self.archive_retention_hours < self.clean_retain_hours:
            raise ValueError(
                f"archive_retention_hours ({self.archive_retention_hours:g}) must be 0 or at "
                f"least clean_retain_hours ({self.clean_retain_hours:g}): archived instants "
                "are deleted no sooner than the data files of their time"
            )
        return self


_WINDOW_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class SloConfig(Section):
    """``replicator.slo``: "``percent`` % of the time every table is replicated within
    ``within_seconds``", judged over the last ``window``."""

    percent: float = Field(
        gt=0, le=100, description="the share of the window a table must be within its goal"
    )
    within_seconds: float = Field(
        gt=0,
        description="the goal: a table's lag time (with the source side: since its connector "
        "was last alive) at most this",
    )
    window: str = Field(
        default="24h",
        pattern=r"^[1-9][0-9]*[smhd]$",
        description="the window compliance is judged over: a number and `s`, `m`, `h` or `d`",
    )

    @property
    def window_seconds(self) -> float:
        return float(int(self.window[:-1]) * _WINDOW_UNITS[self.window[-1]])


class ReplicatorConfig(Section):
    """Micro-batch sizing and bookkeeping."""

    max_batch_events: int = Field(
        default=100_000,
        ge=1,
        description="most messages per micro-batch (larger: faster catch-up, more memory; see "
        "[Performance](../performance.md))",
        json_schema_extra=init(),
    )
    max_batch_seconds: float = Field(
        default=1.0,
        gt=0,
        description="longest wait while filling a micro-batch",
        json_schema_extra=init(),
    )
    topic_refresh_seconds: float = Field(
        default=10.0, gt=0, description="how often new matching topics are looked for"
    )
    work_dir: str = Field(
        default=".cdcctl",
        description="the state store `state.db`, staging files, the dead-letter files, the log "
        "file `cdcctl.log`, and `spark.log` (the Spark JVM's own output; `cdcctl start` keeps "
        "the terminal for its own lines)",
        json_schema_extra=init(),
    )
    tombstone_retention_hours: float = Field(
        default=168.0,
        ge=0,
        description="how long (source time) delete tombstones are kept (and while their commit "
        "is retained by `hudi.clean_retain_hours` / `_commits`), so late events cannot "
        "resurrect rows",
    )
    accept_offset_gaps: list[str] = Field(
        default_factory=list,
        description="tables (glob patterns over names) that go on from the log's start after a "
        "gap in their topic (a checkpoint before the log's start or past its end) instead of "
        'stopping (FAILED; see "Gaps in Kafka" in [Tables](tables.md#tables)); each accepted '
        "gap is recorded in the table's next commit (`cdcctl.accepted_gaps`)",
    )
    slo: SloConfig | None = Field(
        default=None,
        description="a replication SLO, `{ percent = 99, within_seconds = 60, window = "
        '"24h" }`: each table\'s compliance in `status`, the dashboard and metrics, an event '
        "when a table falls out of it and when it is back; see "
        "[Replication SLO](operating.md#replication-slo)",
        json_schema_extra={"shown_default": "unset"},
    )
    source_check_seconds: float = Field(
        default=10.0,
        ge=1.0,
        le=3600.0,
        description="how often the running replicator looks at the source side: Kafka "
        "Connect's connectors (`source.connect_url`), the database's replication slots "
        "(`source.database_dsn`, PostgreSQL) and Debezium's heartbeats; see "
        "[The source side](operating.md#the-source-side)",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="serve Prometheus metrics (`/metrics`) on this port (`0`: a free one); "
        "unset: off. See [Metrics](operating.md#metrics)",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="the address the metrics endpoint listens on",
    )
    log_format: Literal["plain", "json"] = Field(
        default="plain",
        description="the log file's lines (`<work_dir>/cdcctl.log`, written by `cdcctl "
        "start`): `plain` text or `json` (one object a line); see "
        "[Log file](operating.md#log-file)",
    )
    log_max_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=1024,
        description="the log file is rotated past this size (10 MiB by default; at least 1024)",
    )
    log_backups: int = Field(
        default=5,
        ge=1,
        description="rotated log files kept (`cdcctl.log.1` ... `.5`; at least 1)",
    )
    retry_max_seconds: float = Field(
        default=600.0,
        gt=0,
        description="how long one incident of a transient failure (broker unreachable, storage "
        "error, failed Spark job) is retried, with backoff, before the replicator (or, for its "
        "own storage error, the table) stops; see [Retries](operating.md#retries)",
    )
    lease_seconds: float = Field(
        default=30.0,
        ge=1,
        description="a table on object storage: how long the writer's lease outlives its last "
        "renewal (renewed every third of it). A second replicator watches a held lease this "
        "long before it takes it over from a writer presumed dead, and a writer that stalled "
        "longer (a long pause, a frozen machine) finds its lease taken and commits nothing; "
        "see [Object storage](tables.md#object-storage)",
    )


class ErrorsConfig(Section):
    """What happens to a message that cannot be decoded (a bad message)."""

    tolerance: str = Field(
        default="none",
        description="what a bad (undecodable) message does. `none`: its table stops (FAILED) "
        "at the first one, which goes to the dead-letter file; events before it are applied, "
        "nothing after it, and the table's checkpoint stays at it, so after the fix a restart "
        "resumes exactly there (or restart with `all` to skip it). `all`: every bad message "
        "goes to the dead-letter file and is counted (`bad`), the rest applies. Other values "
        "are refused. It replaces `replicator.max_bad_fraction`, which is refused with a "
        "pointer to it",
        json_schema_extra=init(
            'a bad message stops its table; "all": dead-letter bad messages, apply the rest'
        ),
    )

    @field_validator("tolerance")
    @classmethod
    def _tolerance(cls, value: str) -> str:
        if value not in TOLERANCES:
            raise ValueError(
                f'{value!r} is not a tolerance: use "none" (a bad message stops its '
                'table) or "all" (bad messages go to the dead-letter file, the rest applies)'
            )
        return value


class LineageConfig(Section):
    """OpenLineage events: each table's run, its schema and its column lineage."""

    url: str | None = Field(
        default=None,
        description="send OpenLineage run events to this HTTP endpoint (Marquez-compatible: "
        "`POST <url>/<endpoint>`); unset, with `file` unset too: no lineage",
    )
    endpoint: str = Field(default="api/v1/lineage", description="the path under `url`")
    api_key: str | None = Field(
        default=None,
        description=f"a bearer token for `url`, {REFERENCE_DOC}; a literal is refused",
    )
    file: str | None = Field(
        default=None,
        description="append the events to this file instead, one JSON document per line "
        "(relative: to the config file)",
    )
    namespace: str = Field(
        default="cdcctl",
        min_length=1,
        description="the jobs' namespace (each table's job is `<namespace>`/`cdcctl.<table>`)",
    )
    timeout_seconds: float = Field(
        default=5.0, gt=0, description="longest wait for the endpoint per event"
    )

    _reference = field_validator("api_key")(reference_only)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = http_url(value)
        if parts.password is not None or parts.username is not None:
            raise ValueError("credentials must not be in the URL: use an api_key reference")
        return value

    @model_validator(mode="after")
    def _one_sink(self) -> LineageConfig:
        if self.url is not None and self.file is not None:
            raise ValueError("url and file are two places for the same events: set one")
        if self.api_key is not None and self.url is None:
            raise ValueError("api_key is for url: set url too")
        return self

    @property
    def enabled(self) -> bool:
        return self.url is not None or self.file is not None


def is_local_master(master: str) -> bool:
    """Whether a Spark master runs in the driver's own JVM (``local``, ``local[N]``),
    rather than on a cluster's executors."""
    return master.strip().lower().startswith("local")


class SparkConfig(Section):
    """Local Spark session settings (the only place Spark is configured)."""

    master: str = Field(
        default="local[2]",
        description="Spark master: `local[N]`, or a standalone cluster `spark://host:7077` "
        "whose executors reach the target (see "
        "[Spark cluster](operating.md#spark-cluster))",
        json_schema_extra=init(),
    )
    driver_memory: str = Field(
        default="1g", description="Spark driver memory", json_schema_extra=init()
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        description="extra Spark settings (`spark.driver.extraJavaOptions` here is appended to "
        "the engine's JVM flags, so a flag given here wins)",
    )

    @property
    def on_cluster(self) -> bool:
        """Whether the merges run on a cluster's executors (the master, as
        ``[spark.options]`` may override it, is not local): each batch then travels
        with its tasks instead of through the work folder."""
        return not is_local_master(self.options.get("spark.master", self.master))
