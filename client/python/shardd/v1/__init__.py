"""The generated message modules of the shardd.v1 API (gen_stubs.py)."""
