"""The evaluation pool: where the GPU stages of many runs' attempts go (one worker per GPU, least busy first)."""
