"""A target on S3 or an S3-compatible store (MinIO, Ceph, GCS's XML API, R2, moto), through
obstore: Python bindings to the Rust ``object_store`` crate that hudi-rs, delta-rs and the
embedded broker use too.

Why obstore rather than pyarrow's or fsspec's S3 file systems: the table's protocol needs
conditional writes, create-if-absent (``If-None-Match: *``) for completed instants and
compare-and-swap on the ETag (``If-Match``) for the writer's lease, and obstore offers
both as put modes (``mode="create"``, ``mode={"e_tag": ...}``); pyarrow's
``S3FileSystem`` has neither, s3fs only through raw request arguments. A store that
ignores the conditions is unsafe for a table: ``cdcctl test-connection`` checks that a
second create and a stale replace are refused.

Credentials come from ``target.s3``'s references (resolved by the config) or, when none
is configured, from the standard AWS environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, web identity, the instance's or
container's metadata endpoint), as ``object_store`` reads them. They are never logged:
the config registers each resolved secret for redaction, and errors show the store's
message without the request's headers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import S3Store
from pydantic import SecretStr

from engine.files import Content
from engine.storage.base import ObjectInfo, Storage, StorageError, StoreUnavailable, check_path

#: What a failed request raises: obstore's errors, and the built-in ones it maps some to
#: (``FileNotFoundError`` for a 404, also a missing bucket's).
_ERRORS = (BaseError, OSError)

#: The URL scheme of an object-storage target.
SCHEME = "s3://"


def is_object_url(path: str) -> bool:
    """Whether a ``target.path`` names object storage rather than a folder."""
    return path.lower().startswith(SCHEME)


def split_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix/`` -> ``("bucket", "some/prefix")``.

    Raises:
        ValueError: Not an ``s3://`` URL with a bucket, or a prefix with empty, ``.`` or
            ``..`` parts.
    """
    if not is_object_url(url):
        raise ValueError(f"not an s3:// URL: {url!r}")
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # Never echo it: what precedes the @ may be a key.
        raise ValueError("credentials must not be in an s3:// URL: use [target.s3] references")
    if parts.query or parts.fragment or not parts.netloc:
        raise ValueError(f"expected s3://BUCKET/PREFIX, not {url!r}")
    prefix = parts.path.strip("/")
    if prefix:
        check_path(prefix)
    return parts.netloc, prefix


@dataclass(frozen=True)
class S3Settings:
    """Where and how to reach the bucket (``target.path`` and ``[target.s3]``).

    Attributes:
        url: ``s3://bucket/prefix``.
        endpoint: An S3-compatible server's URL (None: AWS's for ``region``).
        region: The bucket's region (None: ``AWS_REGION``/``AWS_DEFAULT_REGION``, else
            ``us-east-1``).
        path_style: ``endpoint/bucket/key`` requests (MinIO, most self-hosted stores)
            instead of ``bucket.endpoint/key``.
        access_key_id, secret_access_key, session_token: Resolved references; None: the
            standard AWS environment.
    """

    url: str
    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None


def _produced(produce: Callable[[Path], None]) -> bytes:
    """What ``produce`` writes to a file, as bytes (a small object put in one request)."""
    with tempfile.TemporaryDirectory(prefix="cdcctl-put-") as tmp:
        file = Path(tmp) / "object"
        produce(file)
        return file.read_bytes()


def _first_line(exc: BaseException) -> str:
    """The store's message without the response body or debug dump."""
    text = str(exc).split("\n", 1)[0]
    return text.split(": <?xml", 1)[0]


class ObjectStorage(Storage):
    """A bucket and prefix; paths are relative to the prefix."""

    def __init__(self, settings: S3Settings, *, patient: bool = True) -> None:
        """Args:
        settings: The bucket, endpoint and credentials.
        patient: Retry a failed request for up to 30 s (the replicator); False: once,
            for up to 5 s (the checks, which should answer quickly).
        """
        bucket, prefix = split_url(settings.url)
        self.settings, self.patient = settings, patient
        self.url = settings.url.rstrip("/")
        self.bucket, self.prefix = bucket, prefix
        options: dict[str, Any] = {"connect_timeout": "5s", "timeout": "60s"}
        config: dict[str, Any] = {"virtual_hosted_style_request": not settings.path_style}
        if settings.endpoint:
            config["endpoint"] = settings.endpoint
            options["allow_http"] = settings.endpoint.lower().startswith("http://")
        if settings.region:
            config["region"] = settings.region
        for key in ("access_key_id", "secret_access_key", "session_token"):
            value = getattr(settings, key)
            if value is not None:
                config[key] = value.get_secret_value()
        retry = {
            "max_retries": 3 if patient else 1,
            "retry_timeout": timedelta(seconds=30 if patient else 5),
        }
        try:
            self._store = S3Store(
                bucket,
                prefix=prefix or None,
                client_options=options,  # type: ignore[arg-type]
                retry_config=retry,  # type: ignore[arg-type]
                **config,
            )
        except _ERRORS as exc:
            raise StorageError(
                f"cannot use {self.url}: {_first_line(exc)}",
                hint="check target.path and [target.s3] (endpoint, region)",
            ) from None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled into Spark tasks as its settings (credentials included: documented in
        # docs/guide/operating.md), and rebuilt with a client of its own there.
        return (partial(ObjectStorage, patient=self.patient), (self.settings,))

    def reader_options(self) -> dict[str, str]:
        s = self.settings
        options = {
            "aws_region": s.region
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1",
            "aws_virtual_hosted_style_request": str(not s.path_style).lower(),
        }
        if s.endpoint:
            options["aws_endpoint_url"] = s.endpoint
            options["aws_allow_http"] = str(s.endpoint.lower().startswith("http://")).lower()
        for key in ("access_key_id", "secret_access_key", "session_token"):
            value = getattr(s, key)
            secret = value.get_secret_value() if value is not None else None
            # The standard AWS environment, as obstore reads it for the writer.
            secret = secret or os.environ.get(f"AWS_{key.upper()}")
            if secret:
                options[f"aws_{key}"] = secret
        return options

    def under(self, folder: str) -> ObjectStorage:
        url = f"{self.url}/{check_path(folder)}"
        return ObjectStorage(replace(self.settings, url=url), patient=self.patient)

    def _failed(self, exc: BaseException, what: str, path: str) -> StorageError:
        where = f"{self.url}/{path}" if path else self.url
        message = _first_line(exc)
        if "NoSuchBucket" in str(exc):
            return StorageError(
                f"{what} {where}: bucket {self.bucket} does not exist",
                hint="create the bucket, or fix the bucket in target.path (and target.s3.endpoint)",
            )
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or " 403 " in str(exc):
            return StorageError(
                f"{what} {where}: access denied ({message})",
                hint="check target.s3.access_key_id / secret_access_key (or the AWS "
                "environment) and the bucket's policy: cdcctl lists, reads, writes and "
                "deletes under the prefix",
            )
        return StoreUnavailable(
            f"{what} {where}: {message}",
            hint="check target.s3.endpoint and that the store is reachable from here",
        )

    def _bucket_missing(self, exc: FileNotFoundError, what: str, path: str) -> None:
        """Raise the bucket's error if a 404 was for the bucket, not the object."""
        if "NoSuchBucket" in str(exc):
            raise self._failed(exc, what, path) from None

    @staticmethod
    def _info(path: str, meta: Any) -> ObjectInfo:
        modified = meta["last_modified"]
        if modified.tzinfo is None:
            modified = modified.replace(tzinfo=UTC)
        return ObjectInfo(path, int(meta["size"]), modified, str(meta["e_tag"] or ""))

    def _written(self, path: str, result: Any, data: bytes) -> ObjectInfo:
        # A put answers with the new ETag; the time is the store's, read by head() when
        # it matters (the commit watcher), so the local clock stands in here.
        return ObjectInfo(path, len(data), datetime.now(UTC), str(result["e_tag"] or ""))

    def read(self, path: str) -> bytes:
        try:
            return bytes(obstore.get(self._store, check_path(path)).bytes())
        except FileNotFoundError as exc:
            self._bucket_missing(exc, "reading", path)
            raise FileNotFoundError(f"{self.url}/{path}") from None
        except _ERRORS as exc:
            raise self._failed(exc, "reading", path) from None

    def write(
        self, path: str, data: Content, *, staging: str | None = None, sync: bool = True
    ) -> ObjectInfo:
        check_path(path)
        if not isinstance(data, bytes):
            # Written to a local temporary file first, then uploaded (in parts when large).
            with tempfile.TemporaryDirectory(prefix="cdcctl-put-") as tmp:
                file = Path(tmp) / "object"
                data(file)
                size = file.stat().st_size
                try:
                    result = obstore.put(self._store, path, file, mode="overwrite")
                except _ERRORS as exc:
                    raise self._failed(exc, "writing", path) from None
            return ObjectInfo(path, size, datetime.now(UTC), str(result["e_tag"] or ""))
        try:
            result = obstore.put(self._store, path, data, mode="overwrite")
        except _ERRORS as exc:
            raise self._failed(exc, "writing", path) from None
        return self._written(path, result, data)

    def create(self, path: str, data: Content, *, staging: str | None = None) -> ObjectInfo | None:
        if not isinstance(data, bytes):
            data = _produced(data)
        try:
            result = obstore.put(self._store, check_path(path), data, mode="create")
        except (AlreadyExistsError, FileExistsError, PreconditionError):
            return None
        except _ERRORS as exc:
            raise self._failed(exc, "creating", path) from None
        return self._written(path, result, data)

    def replace(self, path: str, data: bytes, version: str) -> ObjectInfo | None:
        try:
            result = obstore.put(self._store, check_path(path), data, mode={"e_tag": version})
        except PreconditionError:
            return None
        except FileNotFoundError as exc:
            self._bucket_missing(exc, "replacing", path)
            return None
        except _ERRORS as exc:
            raise self._failed(exc, "replacing", path) from None
        return self._written(path, result, data)

    def head(self, path: str) -> ObjectInfo | None:
        try:
            return self._info(path, obstore.head(self._store, check_path(path)))
        except FileNotFoundError as exc:
            self._bucket_missing(exc, "reading", path)
            return None
        except _ERRORS as exc:
            raise self._failed(exc, "reading", path) from None

    def entries(self, folder: str = "") -> list[ObjectInfo]:
        try:
            found = obstore.list_with_delimiter(self._store, check_path(folder) if folder else None)
        except _ERRORS as exc:
            raise self._failed(exc, "listing", folder) from None
        return sorted((self._info(m["path"], m) for m in found["objects"]), key=lambda o: o.path)

    def folders(self, folder: str = "") -> list[str]:
        try:
            found = obstore.list_with_delimiter(self._store, check_path(folder) if folder else None)
        except _ERRORS as exc:
            raise self._failed(exc, "listing", folder) from None
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in found["common_prefixes"])

    def read_range(self, path: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        # One GET, no HEAD first: a range past the end is cut short by the store; one
        # starting at or after the end is refused with 416 (nothing there to read).
        try:
            return bytes(
                obstore.get_range(self._store, check_path(path), start=start, end=start + length)
            )
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.url}/{path}") from None
        except _ERRORS as exc:
            if "416 Range Not Satisfiable" in str(exc):
                return b""
            raise self._failed(exc, "reading", path) from None

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        try:
            found = obstore.list(self._store, check_path(prefix) if prefix else None).collect()
        except _ERRORS as exc:
            raise self._failed(exc, "listing", prefix) from None
        return sorted((self._info(m["path"], m) for m in found), key=lambda o: o.path)

    def delete(self, path: str) -> None:
        try:
            obstore.delete(self._store, check_path(path))
        except FileNotFoundError:
            return
        except _ERRORS as exc:
            raise self._failed(exc, "deleting", path) from None
