"""Images in and out, the same for sr, preview and analysis: imageio (decode, encode, the limited reader), pixels
(16 -> 8-bit, gray -> RGB), png (our PNG writer and reader), header (size limits), lengths (declared lengths),
metadata (ICC, EXIF, XMP), one container walker per format (jpeg, png_chunks, riff, tiff; container: what they
share), tiling, bicubic."""
