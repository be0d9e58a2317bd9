"""``python -m pipeline`` is the ``preagg`` command."""

from pipeline.cli import main

if __name__ == "__main__":
    main()
