"""The Wormhole perf model: a device time from the host runtime's counters (``costmodel``) and tt-metal's
decode op written as data through the same model (``ttmetal_structure``). Estimates, not measurements.

The FlashDecode planner calls a few closed forms of ``costmodel`` to choose its split (``chunk_cap``,
``key_row_pieces``, ``tile_pieces``, ``split_floor_tiles``, ``split_costs``, ``noc_hops``,
``dram_return_hops``); the model reads plans by their fields and never imports the planner.
"""
