"""A writer in a child process for the lease tests (tests/engine/test_lease.py): takes
the lease on a table in an S3 bucket, then commits numbered instants through it, one
line per commit on stdout, until it has made ``count`` or its lease is lost (exit 3)."""

from __future__ import annotations

import sys
import time

from pydantic import SecretStr

from engine.storage import S3Settings, open_storage
from engine.storage.lease import Lease, LeaseLost


def main(endpoint: str, url: str, name: str, ttl: float, count: int, pause: float) -> int:
    store = open_storage(
        S3Settings(
            url,
            endpoint=endpoint,
            region="us-east-1",
            path_style=True,
            access_key_id=SecretStr("cdcctl-test"),
            secret_access_key=SecretStr("cdcctl-test"),
        )
    )
    lease = Lease.acquire(store, "t/.hoodie/.cdcctl/lease", "table t", ttl=ttl)
    lease.keep_alive()
    print(f"acquired epoch {lease.epoch}", flush=True)
    for i in range(count):
        instant = f"{time.time_ns()}"
        body = f"{name} epoch {lease.epoch} commit {i}".encode()
        try:
            lease.commit(f"t/.hoodie/{instant}.commit", body, f"t/.hoodie/.temp/{instant}")
        except LeaseLost as exc:
            print(f"lost: {exc.message}", flush=True)
            return 3
        print(f"committed {instant} {i}", flush=True)
        time.sleep(pause)
    lease.release()
    print("released", flush=True)
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], a[1], a[2], float(a[3]), int(a[4]), float(a[5])))
