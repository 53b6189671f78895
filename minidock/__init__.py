"""MiniDock: an agentless Docker fleet orchestrator over SSH."""

__all__ = ["__version__"]
__version__ = "0.5.0"
