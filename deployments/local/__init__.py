"""``serve-app serve``: Ray and the application on this machine (``launcher.py``), with
``instance.py`` keeping two local runs on one machine apart."""
