"""Shard IO: shards named by fsspec URLs, and a local cache of remote shards.

A ``file://`` URL is read in place, like a path. Any other URL is copied to local disk by
``ShardCache.local_copy``, named by the SHA-256 of its bytes (so a shard's fingerprint is the
same wherever its bytes came from) and shared between processes through a per-URL ``flock``
and atomic renames: a killed process leaves at most a temp file, and no cache entry ever
names a missing or partial copy. With ``io_options["remote_read"] = "range"``, Parquet
shards are instead read in place by byte range (``open_by_range``) and identified by their
server's ETag and size (``remote_version_fingerprint``). A URL with credentials in it
(``s3://key:secret@bucket/...``) is refused (``credentials_problem``): they come from the
backend's usual sources (for S3, botocore's environment variables and profiles).

Design: docs/design/pipeline_datasets.md
"""

from pipeline.io.atomic import atomic_write
from pipeline.io.options import CacheOptions, IOOptions, RemoteRead
from pipeline.io.remote_files import (
    credentials_problem,
    expand_url,
    is_url,
    local_path,
    open_by_range,
    remote_validators,
    remote_version_fingerprint,
    url_filename,
)
from pipeline.io.shard_cache import CopyPin, ShardCache, content_sha256, evict_unused_copies

__all__ = [
    "CacheOptions",
    "CopyPin",
    "IOOptions",
    "RemoteRead",
    "ShardCache",
    "atomic_write",
    "content_sha256",
    "credentials_problem",
    "evict_unused_copies",
    "expand_url",
    "is_url",
    "local_path",
    "open_by_range",
    "remote_validators",
    "remote_version_fingerprint",
    "url_filename",
]
