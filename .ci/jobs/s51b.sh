# Session 51, call B: is the attention forward power-bound? (benchmarks/attention_power.py: sustained 2 s windows per
# candidate, round-robin, nvidia-smi clock / power / clock-event reasons every 20 ms.) s51a: the timeline says bit 25
# saves 0.6% of a tile's cycles (88720 -> 88125 at 4096 keys), the bench saw -0.15..+0.3%; 8784008's cycles per tile
# against its bench time imply ~1.6 GHz (max 1.98).
# Predictions (before the run): every candidate at the board's power limit (H100 SXM: ~700 W, reason SW power cap) with
# the SM clock ~1.55-1.70 GHz; cuDNN's clock within 2% of ours; per cycle cuDNN ahead at 4096 by about the bench's gap
# (~3%), per joule likewise; 35293320 a higher per-cycle figure than 1738888 by ~0.6% and the same per joule. If
# instead the clocks differ by more than the time ratio, the race is per joule, and the per-tile cycle work is moot.
jx power_4096 110 40 "timeout 105 python3 benchmarks/attention_power.py --seq 4096 --variants 0,35293320,395400 --backends cudnn,flash --window 2 --rounds 3"
jx power_8192 110 40 "timeout 105 python3 benchmarks/attention_power.py --seq 8192 --variants 0,35293320 --backends cudnn --window 2 --rounds 3"
