"""The FlashDecode Metalium kernels (C++ sources, shipped as package data as `ttdecode.kernels`)."""
