"""Storage URLs: the core's one parser (kafscale._core.StorageLocation) as the broker's
--storage setting, the segment readers and Spark's options use it."""

from __future__ import annotations

import pytest

from kafscale._core import StorageLocation
from kafscale.config import Settings, SettingsError, load_settings
from kafscale.spark.options import KafScaleOptionError, ReadOptions


def load(*argv: str) -> Settings:
    return load_settings(list(argv), {})


def test_an_s3_url_names_bucket_namespace_region_and_endpoint() -> None:
    location = StorageLocation("s3://logs/team/orders?region=eu-west-1&endpoint=http://h:9000")
    assert (location.scheme, location.bucket, location.namespace) == ("s3", "logs", "team/orders")
    assert (location.region, location.endpoint, location.directory) == (
        "eu-west-1",
        "http://h:9000",
        None,
    )
    assert str(location) == (
        "s3://logs/team/orders?region=eu-west-1&endpoint=http%3A%2F%2Fh%3A9000"
    )
    assert str(StorageLocation(str(location))) == str(location)


@pytest.mark.parametrize(
    ("url", "scheme", "directory", "namespace"),
    [
        ("./data/default", "file", "./data", "default"),
        ("file:///srv/kafscale/ns1", "file", "/srv/kafscale", "ns1"),
        ("memory://test", "memory", None, "test"),
        ("memory://", "memory", None, "default"),
    ],
)
def test_local_and_memory_locations(
    url: str, scheme: str, directory: str | None, namespace: str
) -> None:
    location = StorageLocation(url)
    assert (location.scheme, location.directory, location.namespace) == (
        scheme,
        directory,
        namespace,
    )
    assert location.bucket is None and location.region is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3://logs", "names a bucket and a namespace"),
        ("s3://logs/ns?regoin=x", "unknown S3 parameter regoin"),
        ("gs://logs/ns", "unknown kind of storage gs://"),
    ],
)
def test_a_bad_url_says_what_one_looks_like(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        StorageLocation(url)


def test_the_storage_setting_sets_the_parts() -> None:
    s3 = load("--storage", "s3://logs/prod?region=eu-west-1&endpoint=http://127.0.0.1:9000")
    assert (s3.s3_bucket, s3.s3_region, s3.s3_endpoint, s3.s3_namespace) == (
        "logs",
        "eu-west-1",
        "http://127.0.0.1:9000",
        "prod",
    )
    assert s3.use_memory_s3 is False
    local = load("--storage", "file:///srv/kafscale/ns1")
    assert (local.data_dir, local.s3_namespace, local.s3_bucket) == ("/srv/kafscale", "ns1", None)
    memory = load("--storage", "memory://test")
    assert (memory.use_memory_s3, memory.s3_namespace) == (True, "test")


def test_a_part_given_as_well_must_agree() -> None:
    agreeing = load("--storage", "s3://logs/prod", "--s3-region", "r", "--s3-bucket", "logs")
    assert (agreeing.s3_bucket, agreeing.s3_region) == ("logs", "r")
    for parts in (
        ["--s3-bucket", "other"],
        ["--s3-namespace", "other"],
        ["--use-memory-s3"],
    ):
        with pytest.raises(SettingsError, match="disagree about where segments go") as info:
            load("--storage", "s3://logs/prod?region=r", *parts)
        assert "--storage" in str(info.value) and parts[0] in str(info.value)
    with pytest.raises(SettingsError, match="disagree"):
        load("--storage", "file:///srv/data/ns", "--s3-bucket", "b", "--s3-region", "r")


def test_an_s3_storage_url_without_a_region_asks_for_one() -> None:
    with pytest.raises(SettingsError, match=r"region=us-east-1"):
        load("--storage", "s3://logs/prod")


def test_a_bad_storage_url_names_the_setting() -> None:
    with pytest.raises(SettingsError, match="--storage: gs://b/n: unknown kind of storage"):
        load("--storage", "gs://b/n")


def test_spark_reads_the_namespace_through_the_same_parser() -> None:
    options = ReadOptions.parse(
        {"path": "s3://logs/team/orders", "subscribe": "t"}, streaming=False
    )
    assert options.namespace == "team/orders"
    with pytest.raises(KafScaleOptionError, match="nothing else can read"):
        ReadOptions.parse({"path": "memory://test", "subscribe": "t"}, streaming=False)
