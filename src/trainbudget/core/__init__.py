"""The pure estimating core: arithmetic only, never imports torch (a test proves it)."""
