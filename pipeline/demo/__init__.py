"""The demo: realistic traffic through the whole pipeline on the embedded services."""
