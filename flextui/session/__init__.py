"""The headless services both front ends drive, between the core and the app or CLI:
a search running in the background for a display (``live_search``, with what it shows
in ``search_watch``), a saved search played back (``playback``), profiling in the
background (``live_profile``), long work on a thread of its own (``jobs``), choosing a
model and cluster from what a person typed (``choices``), and the Gantt chart's layout
(``gantt``). Nothing here imports Textual: the app renders what these compute, and
tests drive them without a terminal.

The Search screen reads a live search and a replayed one alike, through
:class:`~flextui.session.source.SearchSource`."""
