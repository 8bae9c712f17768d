"""Engine diagnostics: how much the harness's own machinery costs and where, on any device: our ``ar`` against
``generate()`` and against a bare decode loop (``ar_vs_generate``, ``bare_loop``, ``replay_loop``), the overhead
switches (``overheads``), each phase of a step (``step_costs``), the ops a step launches and the host
synchronisations it makes (``dispatch``, ``host_sync``, ``host_sync_audit``, ``op_profile``), and the engine against
an ideal one at a fixed acceptance (``engine_efficiency``, ``oracle_drafts``)."""
