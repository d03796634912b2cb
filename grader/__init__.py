"""grpo-kit: problems, loader, grader and site builder for the GRPO exercise kit."""

__version__ = "0.1.0"
