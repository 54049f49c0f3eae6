"""What the tests check against, one job a module: the feed oracle and snapshot checks (``oracle``),
the scenario of every kind of write and its model (``scenario``), named crash points through the
storage layer's fault points (``faults``), fuzz targets of every on-disk decoder (``fuzz``), JPEG
files for the decoder tests (``jpegs``), and the parent's side of worker processes
(``processes``). The worker CLI is ``tests/workers.py``."""
