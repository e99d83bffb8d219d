"""The Ray Serve layer: one thin deployment per component, wrapping serve_app."""
