"""The Ray Serve layer, wrapping serve_app: ``replicas/`` (what runs in Ray, one module per
deployment), ``builder/`` (the application graph and its Serve configs), ``local/`` (``serve-app
serve``), ``cluster.py`` (``serve-app cluster``), ``settings.py`` (the ``serve:`` section all of
them read) and ``cli.py`` (the ``serve-app`` console script)."""
