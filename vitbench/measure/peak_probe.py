"""Child process of a measured peak: one backend measures its matmul rate on one device, prints one JSON line.

Input (argv[1], JSON): {"backend", "device" (the backend's name for it), "threads", "precision", "device_name"
(the device the parent asked about: a different device under that index measures nothing), "policy"}. Output: a
line starting with PEAK_MARK carrying the Reading's fields, or null.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from vitbench.procmem import die_with_parent


def main() -> int:
    from vitbench.backends.base import get_backend
    from vitbench.measure.peak import PEAK_MARK, PeakPolicy, measure_reading

    die_with_parent()
    req = json.loads(sys.argv[1])
    policy = PeakPolicy().updated(req["policy"])
    result = None
    try:
        be = get_backend(req["backend"])
        be.setup(req["device"], req.get("threads"))
        if be.device_info().name == req["device_name"]:
            result = asdict(measure_reading(be, req["precision"], policy))
    except Exception as e:  # noqa: BLE001 - the parent goes on without this backend's reading
        print(f"peak probe failed: {type(e).__name__}: {e}", file=sys.stderr)
    print(PEAK_MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
