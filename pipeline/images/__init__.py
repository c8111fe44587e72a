"""Images in and out: decoding, encoding (PNG), the header checks, tiling, plain bicubic."""
