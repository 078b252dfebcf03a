"""`ray start --address=HEAD ...` for a second node on this machine's loopback: Ray's own command, run as `ray` runs
it, with one thing pinned. Ray 2.60 turns 127.0.0.1 into this machine's other address when it joins a node (and with
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps it on loopback, it refuses to start any node but the head), so the
address Ray looks up for this machine is 127.0.0.1 here, as RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes it for the
processes the node starts (that variable is in their environment).

    python tests/ray_start_node.py start --address=127.0.0.1:PORT --node-ip-address=127.0.0.1 ... --block
"""

import sys

from ray._private import ray_constants, services

ray_constants.ENABLE_RAY_CLUSTER = True  # past `ray start`'s refusal of a node that is not the head
services.get_node_ip_address = lambda address=None: services.get_localhost_ip()  # 127.0.0.1, never another

from ray.scripts.scripts import main  # noqa: E402 - after the two lines above

sys.argv = ["ray", *sys.argv[1:]]
main()
