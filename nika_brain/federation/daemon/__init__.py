"""The federation daemon (`nika-brain federation up [--detach] | down | status`): one process per brain
that runs the federation by itself, as a host of *services* (service.py: a Protocol with start / tick /
stop and a registry of "module:factory" strings, so a room plugs a service in without editing the host).

Services (services.SERVICES): the resident embedder and triage over a unix socket (embedder.py), the
supervisor with the redelivery of queued prompts and the handover follow-up (supervise.py), work
stealing on behalf of each idle kernel (stealing.py), the triggers and the daily summaries / super-chunk
merges on a schedule (schedule.py), and bus retention (retention.py). host.py is the process: pid
file and lock (one per brain), signals, the tick loop, its status file.

Ranks above every other federation room: it drives them all; nothing imports it but the CLI.
"""
