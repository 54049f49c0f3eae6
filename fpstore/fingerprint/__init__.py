"""Text to fingerprint: normalisation, HTML main content, shingles, the versioned :class:`Pipeline`.

The first layer of the data flow. It imports nothing of fpstore but the shared base (errors,
mixing, parallel, the kernel selector).
"""
