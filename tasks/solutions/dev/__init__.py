"""Developer scripts behind the reference solutions: the Triton kernels, the generator that compiles them into
answers, the CPU-interpreter check and the GPU tuning script. Users run the answers, not these."""
