"""The ray executor: a run's tasks and scorings on a Ray cluster (``--executor ray``). Ray itself is imported only
inside functions (``connect.import_ray``), so importing these modules needs no Ray."""
