"""The image layer: a task's image pulled and sanitised (``prepare``), names and registries (``names``, a leaf),
the disk images take (``disk``), the preflight (``preflight``), pruning (``prune``), prefetch (``prefetch``), a
run's images on one machine (``cache``) and the Debian base image the bundled tasks build on (``debian_base``)."""
