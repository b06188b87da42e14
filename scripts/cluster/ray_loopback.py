"""`ray start ARGS...` with every Ray service of the node bound to loopback (scripts/cluster/up.sh runs both raylets
through it).

Ray 2.60 binds its gRPC servers (GCS, raylet, object manager, core workers) to all interfaces unless the node's IP
is loopback, and `ray start --node-ip-address=127.0.0.1` does not give it that IP: `resolve_ip_for_localhost`
(ray/_private/services.py) replaces a loopback address by `get_node_ip_address()`, the address routed to the
outside. Its `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` makes that function answer loopback, but `ray start --address`
(a second node) refuses to run under it. So here the function answers loopback for this one `ray start` process;
the node's own processes receive `--node-ip-address=127.0.0.1` from it. Drivers (a sweep's `ray.init`) rewrite the
address the same way: run them with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (up.sh's callers export it).
"""

import sys

import ray._private.services as services
from ray._common.network_utils import get_localhost_ip

services.get_node_ip_address = lambda address=None: get_localhost_ip()

from ray.scripts.scripts import main  # noqa: E402 - after the patch

if __name__ == "__main__":
    sys.argv[0] = "ray"
    sys.exit(main())
