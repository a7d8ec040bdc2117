"""The warning a target gives when a custom op runs its numpy reference on the host."""


class CustomOpFallbackWarning(UserWarning):
    """A custom op without a kernel for this target runs its reference on the host (its definition
    allows it: host_fallback=True)."""
