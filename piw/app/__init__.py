"""The full-screen run viewer (``piw view``), built on Textual; the same app is served to a browser with
textual-serve.

=================== =============================================================================
``viewer``          :class:`~piw.app.viewer.ViewerApp`: the screen stack, the help overlay, small terminals
``runs_screen``     the runs list: status, title, age, current node, cost; filter and search
``run_screen``      the graph beside the steps/conversation/updates/progress/trace/state panes, time travel,
                    live following
``step_screen``     one step's card expanded
``pane``            ``LinesPane``: a paged, scrolling list of lines with a cursor
``sources``         what each pane draws, page by page, from the pure views of :mod:`piw.views`
``reader``          one run as the viewer reads it: fast first state, trace index, checkpoints, live tail
``runs``            the runs list rows
``serve``           ``--serve`` through textual-serve
=================== =============================================================================

The app reads bundles only: it never writes to a run and never imports the engine, executors, providers or the
writer (``tests/test_imports.py``). Importing it loads Textual, so only the ``view`` command does.
"""
