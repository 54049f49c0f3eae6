# Type stub of the compiled kernel cext/_html_c.pyx; its specification twin is
# fpstore/fingerprint/_html_py.py (nesting_depth). tests/test_stubs.py checks the names.

def nesting_depth(html: str, limit: int) -> int: ...
