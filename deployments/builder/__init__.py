"""The application graph from a configuration (``graph.py``: ``build_app`` for Serve configs,
``serve run`` and RayService) and the Serve config files rendered from it
(``serve_config.py`` writes ``deployments/serve_configs/``)."""
