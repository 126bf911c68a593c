"""Test helpers: processes, raw Kafka wire protocol, independent segment parser."""
