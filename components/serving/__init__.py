"""What every tab's calls go through and what a visitor owns: the guard around each handler (guard),
a visitor's turns (turns, fair_queue, people), their files and uploads (visitor, session_memory,
upload_allowance, exports), typed values past a slider's range (range_guard), and the first views
kept ahead (first_views)."""
