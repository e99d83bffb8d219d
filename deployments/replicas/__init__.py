"""What runs inside Ray: one module per deployment (chunker, dense, splade, reranker, store,
llm, ingress) on one base (``base.py``), and what those replicas use at run time: the typed
handle seam between them (``handles.py``), the edge on Serve's HTTP servers (``edge.py``),
Ray metrics, replica logging, tokenizer threads and each deployment's Serve options.
Nothing here imports the builder, the local launcher or the cluster CLI."""
