"""KafScale: a Kafka-compatible broker with stateless brokers, log segments in object storage
(S3) and metadata in etcd (or an embedded store for a single node).

The data plane is the Rust extension ``kafscale._core``; it is imported only where it is needed
(``kafscale.broker``, ``kafscale.log``), so ``kafscale.config`` and the admin handlers can be
used and tested without the extension being built.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kafscale")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
