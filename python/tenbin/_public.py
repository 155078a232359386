"""The mark of the package's public objects."""


def public(obj):
    """Names ``obj`` as the package's (``tenbin.X`` in reprs, ``help()`` and
    the reference docs), wherever it is defined."""
    obj.__module__ = "tenbin"
    return obj
