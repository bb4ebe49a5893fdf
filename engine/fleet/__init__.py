"""`trackscope fleet`: the same bench configurations on every GPU of a Ray cluster, or on the GPU types asked for.

Why Ray (a kept distributed engine, not a home-made scheduler): its actors are long-lived processes that
hold state (torch imported, CUDA initialised, the tracker built and its graphs compiled once per GPU); it
places them by GPU count and by accelerator type (``accelerator_type:T4`` resources, detected from NVML on
each node); ``runtime_env`` ships a user's plugin code to every node; ``ray.wait`` streams results back as
each finishes; and an actor on a node that dies is reported (``ActorDiedError``) rather than waited for.

Ray is imported lazily, inside the functions that need it (``engine.fleet.runner``, ``engine.fleet.actor``):
``import engine`` and every other verb work without it. ``engine.fleet.plan`` and ``engine.fleet.index`` use no
Ray at all (the fleet folder is read by ``diff``, ``gate`` and the app without it).
"""
