// PNG image data for 8-bit images, the sr stage's PNG writer and reader (pipeline.images.png): the IDAT chunk's
// zlib stream written (sr_png_idat_u8), and inflated image data unfiltered (sr_png_unfilter_u8).
//
// Each row takes PNG's Average or Up filter, whichever leaves the smaller residual (Average predicts photos: on srcnn
// outputs 7 % fewer bytes than Up under the same codes; Up turns flat and vertically repeating areas into zeros), and
// each band of rows (~256 KiB) becomes one deflate block under a Huffman code made for that band: literals, and
// stretches that repeat pixel by pixel (flat areas, edges along a row) as matches at the distance of one pixel. No
// other LZ77 search: on filtered photos it saves little and costs most of a general compressor's time. A band that
// would code larger than it is goes as stored blocks, so noise never grows past its raw size. Any zlib inflater reads
// the result (the tests decode it with zlib, OpenCV, Pillow and Chromium).
#include "pngErrors.h"
#include "srPng.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#define SR_PNG_X86 1
#include <immintrin.h> // SSSE3 and AVX2, used only where the CPU reports them (target attributes)
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the bit writer stores whole words in deflate's (little-endian) byte order"
#endif

namespace
{

// The kernels in use (sr_png_set_simd): SSE2 alone (x86-64's baseline), SSSE3's byte shuffle for the red-blue swap,
// AVX2 for the rest. Each level writes the same bytes.
enum SimdLevel
{
    kSimdSse2 = 0,
    kSimdSsse3 = 1,
    kSimdAvx2 = 2
};

int cpuSimd()
{
#if SR_PNG_X86
    __builtin_cpu_init(); // this may run before libgcc's own initialiser
    if (__builtin_cpu_supports("avx2"))
        return kSimdAvx2;
    if (__builtin_cpu_supports("ssse3"))
        return kSimdSsse3;
#endif
    return kSimdSse2;
}

int const kCpuSimd = cpuSimd();
bool kSsse3 = kCpuSimd >= kSimdSsse3;
bool kAvx2 = kCpuSimd >= kSimdAvx2;

constexpr int kFilterUp = 2;
constexpr int kFilterAverage = 3;
constexpr int kEndOfBlock = 256;
constexpr int kSymbols = 286; // literals 0..255, the end of block, match lengths 257..285
constexpr int kDistances = 4; // distance codes 0-3 (distances 1-4: one pixel of 1-4 bytes), each of kDistanceBits
constexpr int kDistanceBits = 2;
constexpr size_t kMinRun = 12; // repeating bytes coded as matches rather than literals
constexpr int kMaxMatch = 258;
constexpr int kMaxBits
    = 14; // the longest literal code (deflate allows 15): four fit the writer's 64 bits with 7 pending
constexpr int kMaxLengthBits = 7; // ... and its longest code-length code
constexpr size_t kBandBytes = 256 << 10;
constexpr size_t kStoredMax = 65535;
constexpr uint32_t kAdlerBase = 65521;
constexpr size_t kAdlerBlock = 5552; // bytes summed before the 32-bit sums must be reduced (zlib's NMAX)
// The code-length code's lengths go out in this order (RFC 1951, 3.2.7).
constexpr std::array<int, 19> kLengthOrder = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

// Deflate's bit order: least significant bit first; whole 32-bit words stored as they fill.
struct BitWriter
{
    uint8_t* out;
    uint64_t bits = 0;
    int count = 0;

    void put(uint32_t value, int n)
    {
        bits |= static_cast<uint64_t>(value) << count;
        count += n;
        if (count >= 32)
            word();
    }

    void word()
    {
        uint32_t const w = static_cast<uint32_t>(bits);
        std::memcpy(out, &w, 4); // little-endian hosts: the byte order deflate wants
        out += 4;
        bits >>= 32;
        count -= 32;
    }

    // Pads to a byte boundary and writes out every pending byte.
    void align()
    {
        while (count > 0)
        {
            *out++ = static_cast<uint8_t>(bits);
            bits >>= 8;
            count = std::max(count - 8, 0);
        }
        bits = 0;
    }
};

uint32_t reverseBits(uint32_t code, int n)
{
    uint32_t r = 0;
    for (int i = 0; i < n; ++i)
        r |= ((code >> i) & 1u) << (n - 1 - i);
    return r;
}

// Huffman code lengths for `freq` (symbols with frequency 0 get none), none longer than maxBits: the frequencies
// are halved (kept non-zero) until the tree fits. At least two symbols get a code, as one-symbol codes are
// incomplete and some inflaters refuse them.
void codeLengths(uint32_t const* freqIn, int n, int maxBits, uint8_t* lengths)
{
    std::vector<uint64_t> freq(freqIn, freqIn + n);
    int used = static_cast<int>(std::count_if(freq.begin(), freq.end(), [](uint64_t f) { return f > 0; }));
    for (int s = 0; s < n && used < 2; ++s)
        if (freq[s] == 0)
        {
            freq[s] = 1;
            ++used;
        }
    std::vector<int> leaves;
    std::vector<uint64_t> weight(2 * n);
    std::vector<int> parent(2 * n), depth(2 * n);
    for (;;)
    {
        leaves.clear();
        for (int s = 0; s < n; ++s)
            if (freq[s] > 0)
                leaves.push_back(s);
        std::stable_sort(leaves.begin(), leaves.end(), [&](int a, int b) { return freq[a] < freq[b]; });
        int const m = static_cast<int>(leaves.size());
        for (int i = 0; i < m; ++i)
            weight[i] = freq[leaves[i]];
        // Two queues: the sorted leaves, and the internal nodes in the order they are made (already sorted).
        int leaf = 0, inner = m;
        auto smallest
            = [&](int made) { return leaf < m && (inner >= made || weight[leaf] <= weight[inner]) ? leaf++ : inner++; };
        for (int k = m; k < 2 * m - 1; ++k)
        {
            int const a = smallest(k);
            int const b = smallest(k);
            weight[k] = weight[a] + weight[b];
            parent[a] = parent[b] = k;
        }
        depth[2 * m - 2] = 0;
        int longest = 0;
        for (int k = 2 * m - 3; k >= 0; --k)
        {
            depth[k] = depth[parent[k]] + 1;
            longest = std::max(longest, depth[k]);
        }
        if (longest <= maxBits)
        {
            std::fill(lengths, lengths + n, uint8_t {0});
            for (int i = 0; i < m; ++i)
                lengths[leaves[i]] = static_cast<uint8_t>(depth[i]);
            return;
        }
        for (auto& f : freq)
            if (f > 0)
                f = (f >> 1) | 1u;
    }
}

// Canonical codes for `lengths` (RFC 1951, 3.2.2), bit-reversed for the writer; each entry is code << 4 | length.
void canonicalCodes(uint8_t const* lengths, int n, uint32_t* codes)
{
    std::array<uint32_t, kMaxBits + 2> count {}, next {};
    for (int s = 0; s < n; ++s)
        ++count[lengths[s]];
    count[0] = 0;
    uint32_t code = 0;
    for (int bits = 1; bits <= kMaxBits + 1; ++bits)
    {
        code = (code + count[bits - 1]) << 1;
        next[bits] = code;
    }
    for (int s = 0; s < n; ++s)
    {
        int const len = lengths[s];
        codes[s] = len == 0 ? 0 : reverseBits(next[len]++, len) << 4 | static_cast<uint32_t>(len);
    }
}

// zlib's checksum over `data`, continuing from `adler` (SSE2: 16 bytes a step, sums reduced every kAdlerBlock).
uint32_t adler32Sse2(uint32_t adler, uint8_t const* data, size_t n)
{
    uint64_t s1 = adler & 0xffffu, s2 = adler >> 16;
    while (n > 0)
    {
        size_t block = std::min(n, kAdlerBlock);
        n -= block;
#if defined(__SSE2__)
        size_t const chunks = block / 16;
        if (chunks > 0)
        {
            __m128i const zero = _mm_setzero_si128();
            __m128i const wHi = _mm_setr_epi16(16, 15, 14, 13, 12, 11, 10, 9);
            __m128i const wLo = _mm_setr_epi16(8, 7, 6, 5, 4, 3, 2, 1);
            __m128i sum = zero, before = zero, weighted = zero;
            for (size_t c = 0; c < chunks; ++c)
            {
                __m128i const v = _mm_loadu_si128(reinterpret_cast<__m128i const*>(data + 16 * c));
                before = _mm_add_epi32(before, sum); // the sum of the chunks before this one, once per chunk
                sum = _mm_add_epi32(sum, _mm_sad_epu8(v, zero));
                weighted = _mm_add_epi32(weighted, _mm_madd_epi16(_mm_unpacklo_epi8(v, zero), wHi));
                weighted = _mm_add_epi32(weighted, _mm_madd_epi16(_mm_unpackhi_epi8(v, zero), wLo));
            }
            alignas(16) uint32_t a[4], b[4], w[4];
            _mm_store_si128(reinterpret_cast<__m128i*>(a), sum);
            _mm_store_si128(reinterpret_cast<__m128i*>(b), before);
            _mm_store_si128(reinterpret_cast<__m128i*>(w), weighted);
            uint64_t const bytes = 16 * chunks;
            // s2 gains, per byte j of the m bytes, s1 before it plus itself: m * s1 + sum (m - j) * b_j.
            s2 += bytes * s1 + 16 * (uint64_t {b[0]} + b[2]) + uint64_t {w[0]} + w[1] + w[2] + w[3];
            s1 += uint64_t {a[0]} + a[2];
            data += bytes;
            block -= bytes;
        }
#endif
        for (size_t i = 0; i < block; ++i)
        {
            s1 += data[i];
            s2 += s1;
        }
        data += block;
        s1 %= kAdlerBase;
        s2 %= kAdlerBase;
    }
    return static_cast<uint32_t>(s2 << 16 | s1);
}

#if SR_PNG_X86
__attribute__((target("avx2"))) uint32_t sum32(__m256i v)
{
    __m128i const four = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    __m128i const two = _mm_add_epi32(four, _mm_shuffle_epi32(four, _MM_SHUFFLE(1, 0, 3, 2)));
    return static_cast<uint32_t>(
        _mm_cvtsi128_si32(_mm_add_epi32(two, _mm_shuffle_epi32(two, _MM_SHUFFLE(2, 3, 0, 1)))));
}

// adler32Sse2's sums, 32 bytes a step.
__attribute__((target("avx2"))) uint32_t adler32Avx2(uint32_t adler, uint8_t const* data, size_t n)
{
    uint64_t s1 = adler & 0xffffu, s2 = adler >> 16;
    __m256i const zero = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1);
    __m256i const weights = _mm256_setr_epi8(32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14,
        13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    while (n > 0)
    {
        size_t block = std::min(n, kAdlerBlock);
        n -= block;
        size_t const chunks = block / 32;
        __m256i sum = zero, before = zero, weighted = zero;
        for (size_t c = 0; c < chunks; ++c)
        {
            __m256i const v = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(data + 32 * c));
            before = _mm256_add_epi32(before, sum);
            sum = _mm256_add_epi32(sum, _mm256_sad_epu8(v, zero));
            weighted = _mm256_add_epi32(weighted, _mm256_madd_epi16(_mm256_maddubs_epi16(v, weights), ones));
        }
        uint64_t const bytes = 32 * chunks;
        s2 += bytes * s1 + 32 * uint64_t {sum32(before)} + sum32(weighted);
        s1 += sum32(sum);
        data += bytes;
        block -= bytes;
        for (size_t i = 0; i < block; ++i)
        {
            s1 += data[i];
            s2 += s1;
        }
        data += block;
        s1 %= kAdlerBase;
        s2 %= kAdlerBase;
    }
    return static_cast<uint32_t>(s2 << 16 | s1);
}
#endif

uint32_t adler32(uint32_t adler, uint8_t const* data, size_t n)
{
#if SR_PNG_X86
    if (kAvx2)
        return adler32Avx2(adler, data, n);
#endif
    return adler32Sse2(adler, data, n);
}

// One row with the Average filter: out[0] = 3, out[1 + x] = raw[x] - floor((left + up) / 2), where left is the
// sample `bpp` bytes back (0 before the first pixel) and up the row above's (`prior`; 0 for the first row).
void filterAverage(uint8_t const* raw, uint8_t const* prior, size_t n, int bpp, uint8_t* out)
{
    *out++ = kFilterAverage;
    size_t const head = std::min(n, static_cast<size_t>(bpp));
    for (size_t x = 0; x < head; ++x)
        out[x] = static_cast<uint8_t>(raw[x] - ((prior ? prior[x] : 0) >> 1));
    size_t x = head;
    if (prior == nullptr)
    {
        for (; x < n; ++x)
            out[x] = static_cast<uint8_t>(raw[x] - (raw[x - bpp] >> 1));
        return;
    }
#if defined(__SSE2__)
    __m128i const one = _mm_set1_epi8(1);
    for (; x + 16 <= n; x += 16)
    {
        __m128i const left = _mm_loadu_si128(reinterpret_cast<__m128i const*>(raw + x - bpp));
        __m128i const up = _mm_loadu_si128(reinterpret_cast<__m128i const*>(prior + x));
        __m128i const cur = _mm_loadu_si128(reinterpret_cast<__m128i const*>(raw + x));
        // floor((a + b) / 2) = rounded-up average minus the odd sum's half
        __m128i const avg = _mm_sub_epi8(_mm_avg_epu8(left, up), _mm_and_si128(_mm_xor_si128(left, up), one));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), _mm_sub_epi8(cur, avg));
    }
#endif
    for (; x < n; ++x)
        out[x] = static_cast<uint8_t>(raw[x] - ((raw[x - bpp] + prior[x]) >> 1));
}

// One row with the Up filter: out[0] = 2, out[1 + x] = raw[x] - prior[x] (identical rows become zeros).
void filterUp(uint8_t const* raw, uint8_t const* prior, size_t n, uint8_t* out)
{
    *out++ = kFilterUp;
    size_t x = 0;
#if defined(__SSE2__)
    for (; x + 16 <= n; x += 16)
    {
        __m128i const up = _mm_loadu_si128(reinterpret_cast<__m128i const*>(prior + x));
        __m128i const cur = _mm_loadu_si128(reinterpret_cast<__m128i const*>(raw + x));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), _mm_sub_epi8(cur, up));
    }
#endif
    for (; x < n; ++x)
        out[x] = static_cast<uint8_t>(raw[x] - prior[x]);
}

// libpng's measure of a filtered row: the sum of its bytes' distances from 0, each read as signed.
uint64_t residual(uint8_t const* f, size_t n)
{
    uint64_t sum = 0;
    size_t x = 0;
#if defined(__SSE2__)
    __m128i acc = _mm_setzero_si128();
    for (; x + 16 <= n; x += 16)
    {
        __m128i const v = _mm_loadu_si128(reinterpret_cast<__m128i const*>(f + x));
        __m128i const mag = _mm_min_epu8(v, _mm_sub_epi8(_mm_setzero_si128(), v)); // min(b, 256 - b)
        acc = _mm_add_epi64(acc, _mm_sad_epu8(mag, _mm_setzero_si128()));
    }
    alignas(16) uint64_t lanes[2];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc);
    sum = lanes[0] + lanes[1];
#endif
    for (; x < n; ++x)
        sum += std::min<int>(f[x], 256 - f[x]);
    return sum;
}

#if SR_PNG_X86
// filterRow for a row with one above, 32 bytes a step: both filters and their residuals in one pass over the row.
__attribute__((target("avx2"))) void filterRowAvx2(
    uint8_t const* raw, uint8_t const* prior, size_t n, int bpp, uint8_t* out, uint8_t* spare)
{
    uint8_t* average = out + 1;
    uint8_t* up = spare + 1;
    out[0] = kFilterAverage;
    spare[0] = kFilterUp;
    uint64_t residualAverage = 0, residualUp = 0;
    auto scalar = [&](size_t x, int left)
    {
        average[x] = static_cast<uint8_t>(raw[x] - ((left + prior[x]) >> 1));
        up[x] = static_cast<uint8_t>(raw[x] - prior[x]);
        residualAverage += std::min<int>(average[x], 256 - average[x]);
        residualUp += std::min<int>(up[x], 256 - up[x]);
    };
    size_t x = 0;
    for (; x < std::min(n, static_cast<size_t>(bpp)); ++x)
        scalar(x, 0);
    __m256i const zero = _mm256_setzero_si256(), one = _mm256_set1_epi8(1);
    __m256i sumAverage = zero, sumUp = zero;
    for (; x + 32 <= n; x += 32)
    {
        __m256i const left = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(raw + x - bpp));
        __m256i const above = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(prior + x));
        __m256i const cur = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(raw + x));
        __m256i const mean
            = _mm256_sub_epi8(_mm256_avg_epu8(left, above), _mm256_and_si256(_mm256_xor_si256(left, above), one));
        __m256i const a = _mm256_sub_epi8(cur, mean), u = _mm256_sub_epi8(cur, above);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(average + x), a);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(up + x), u);
        sumAverage = _mm256_add_epi64(sumAverage, _mm256_sad_epu8(_mm256_min_epu8(a, _mm256_sub_epi8(zero, a)), zero));
        sumUp = _mm256_add_epi64(sumUp, _mm256_sad_epu8(_mm256_min_epu8(u, _mm256_sub_epi8(zero, u)), zero));
    }
    for (; x < n; ++x)
        scalar(x, raw[x - bpp]);
    alignas(32) uint64_t lanesAverage[4], lanesUp[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanesAverage), sumAverage);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanesUp), sumUp);
    for (int i = 0; i < 4; ++i)
    {
        residualAverage += lanesAverage[i];
        residualUp += lanesUp[i];
    }
    if (residualUp < residualAverage)
        std::memcpy(out, spare, n + 1);
}
#endif

// A row equal to the one above (drawings, screenshots, any upscale that repeats rows): both filters' answers without
// computing either. Up leaves zeros (residual 0), so Average keeps the row only where it leaves zeros too (its
// residual must be smaller to lose); then each is all zeros. True when the row was one.
bool repeatedRow(uint8_t const* raw, uint8_t const* prior, size_t n, int bpp, uint8_t* out)
{
    if (std::memcmp(raw, prior, n) != 0)
        return false;
    bool averageZero = true; // raw - floor((left + raw) / 2) == 0, looked at until a byte is not
    for (size_t x = 0; x < n && averageZero; ++x)
        averageZero = raw[x] == (((x < static_cast<size_t>(bpp) ? 0 : raw[x - bpp]) + raw[x]) >> 1);
    out[0] = averageZero ? kFilterAverage : kFilterUp;
    std::memset(out + 1, 0, n);
    return true;
}

// One row with whichever of the Average and Up filters leaves the smaller residual: Average predicts photos better,
// Up turns flat and vertically repeating areas (drawings, screenshots) into runs of zeros. `spare`: a row of scratch.
// Returns whether the filtered row is all zeros (a row equal to the one above): nothing to swap.
bool filterRow(uint8_t const* raw, uint8_t const* prior, size_t n, int bpp, uint8_t* out, uint8_t* spare)
{
    if (prior != nullptr && repeatedRow(raw, prior, n, bpp, out))
        return true;
#if SR_PNG_X86
    if (kAvx2 && prior != nullptr)
    {
        filterRowAvx2(raw, prior, n, bpp, out, spare);
        return false;
    }
#endif
    filterAverage(raw, prior, n, bpp, out);
    if (prior == nullptr)
        return false;
    filterUp(raw, prior, n, spare);
    if (residual(spare + 1, n) < residual(out + 1, n))
        std::memcpy(out, spare, n + 1);
    return false;
}

// BGR(A) <-> RGB(A) over `pixels` pixels: a filtered row's (the filters work per channel, so swapping after one equals
// swapping before it) or a whole unfiltered image's. One pixel a step was a quarter of the encoder's CPU on a
// 1536^2 output; SSSE3's byte shuffle swaps 5 RGB or 4 RGBA pixels a step where the CPU has it.
void swapRedBlueScalar(uint8_t* samples, size_t pixels, int channels)
{
    for (size_t p = 0; p < pixels; ++p, samples += channels)
        std::swap(samples[0], samples[2]);
}

#if SR_PNG_X86
__attribute__((target("ssse3"))) void swapRedBlueSsse3(uint8_t* samples, size_t pixels, int channels)
{
    // RGB: 16 bytes loaded, the first 15 (5 pixels) swapped and the 16th stored unchanged (the next step's first)
    __m128i const rgb = _mm_setr_epi8(2, 1, 0, 5, 4, 3, 8, 7, 6, 11, 10, 9, 14, 13, 12, 15);
    __m128i const rgba = _mm_setr_epi8(2, 1, 0, 3, 6, 5, 4, 7, 10, 9, 8, 11, 14, 13, 12, 15);
    size_t const step = channels == 3 ? 5 : 4; // pixels a step
    __m128i const order = channels == 3 ? rgb : rgba;
    size_t const bytes = pixels * static_cast<size_t>(channels);
    size_t const stride = step * static_cast<size_t>(channels);
    size_t p = 0;
    if (bytes >= 16 + stride)
    {
        // each step's bytes are loaded before the step before it stores (RGB: over the byte it stores unchanged),
        // so no load waits on a store it overlaps
        __m128i v = _mm_loadu_si128(reinterpret_cast<__m128i const*>(samples));
        for (; (p + step) * static_cast<size_t>(channels) + 16 <= bytes; p += step)
        {
            __m128i const next = _mm_loadu_si128(
                reinterpret_cast<__m128i const*>(samples + (p + step) * static_cast<size_t>(channels)));
            _mm_storeu_si128(
                reinterpret_cast<__m128i*>(samples + p * static_cast<size_t>(channels)), _mm_shuffle_epi8(v, order));
            v = next;
        }
        _mm_storeu_si128(
            reinterpret_cast<__m128i*>(samples + p * static_cast<size_t>(channels)), _mm_shuffle_epi8(v, order));
        p += step;
    }
    swapRedBlueScalar(samples + p * static_cast<size_t>(channels), pixels - p, channels);
}

#endif

void swapRedBlue(uint8_t* samples, size_t pixels, int channels)
{
#if SR_PNG_X86
    if (kSsse3)
        return swapRedBlueSsse3(samples, pixels, channels);
#endif
    swapRedBlueScalar(samples, pixels, channels);
}

// A stretch of bytes each equal to the byte a pixel before it (flat areas, and edges running along a row, repeat
// pixel by pixel once filtered): coded as matches at the distance of one pixel.
struct Run
{
    size_t start;
    size_t length;
};

// Where a repeat at distance `period` that holds data[e - 1] ends: 8 bytes a step, the first differing byte found
// from the words' XOR (little-endian). Long runs (flat areas, repeated rows once Up-filtered) were 1 byte a step.
size_t runEndScalar(uint8_t const* data, size_t e, size_t n, size_t period)
{
    for (; e + 8 <= n; e += 8)
    {
        uint64_t w, before;
        std::memcpy(&w, data + e, 8);
        std::memcpy(&before, data + e - period, 8);
        if (uint64_t const diff = w ^ before; diff != 0)
            return e + static_cast<size_t>(__builtin_ctzll(diff) >> 3);
    }
    while (e < n && data[e] == data[e - period])
        ++e;
    return e;
}

#if SR_PNG_X86
// runEndScalar, 32 bytes a step.
__attribute__((target("avx2"))) size_t runEndAvx2(uint8_t const* data, size_t e, size_t n, size_t period)
{
    for (; e + 32 <= n; e += 32)
    {
        __m256i const w = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(data + e));
        __m256i const before = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(data + e - period));
        if (auto const same = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(w, before)));
            same != 0xffffffffu)
            return e + static_cast<size_t>(__builtin_ctz(~same));
    }
    return runEndScalar(data, e, n, period);
}
#endif

size_t runEnd(uint8_t const* data, size_t e, size_t n, size_t period)
{
#if SR_PNG_X86
    if (kAvx2)
        return runEndAvx2(data, e, n, period);
#endif
    return runEndScalar(data, e, n, period);
}

// The word at k equals the one a pixel before it: grown both ways (not below `covered`, the end of the last run) and
// kept as a run when it holds kMinRun bytes or more.
void growRun(uint8_t const* data, size_t n, size_t period, size_t k, size_t& covered, std::vector<Run>& runs)
{
    size_t s = k;
    while (s > covered && data[s - 1] == data[s - 1 - period])
        --s;
    size_t const e = runEnd(data, k + 8, n, period);
    if (e - s >= kMinRun)
    {
        runs.push_back({s, e - s});
        covered = e;
    }
}

// The repeats of kMinRun or more bytes at distance `period` (bytes per pixel). An 8-byte word equal to the word a
// pixel before it is looked for, 8 bytes apart, and grown both ways, so a photo costs two loads and a compare per 8
// bytes, and every repeat of 15 bytes or more is found (one holds a word that starts at a multiple of 8). From `k`
// (a multiple of 8) on; the words before it were looked at already.
std::vector<Run> findRunsScalar(
    uint8_t const* data, size_t n, size_t period, size_t k = 8, size_t covered = 0, std::vector<Run> runs = {})
{
    covered = std::max(covered, period); // the first pixel has nothing before it in this band
    for (; k + 8 <= n; k += 8)
    {
        uint64_t w, before;
        std::memcpy(&w, data + k, 8);
        std::memcpy(&before, data + k - period, 8);
        if (k >= covered && w == before)
            growRun(data, n, period, k, covered, runs);
    }
    return runs;
}

#if SR_PNG_X86
// findRunsScalar, four words a step (the same runs).
__attribute__((target("avx2"))) std::vector<Run> findRunsAvx2(uint8_t const* data, size_t n, size_t period)
{
    std::vector<Run> runs;
    size_t covered = period, k = 8;
    while (k + 32 <= n)
    {
        __m256i const w = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(data + k));
        __m256i const before = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(data + k - period));
        auto equal = static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(w, before))));
        for (; equal != 0; equal &= equal - 1)
            if (size_t const at = k + 8 * static_cast<size_t>(__builtin_ctz(equal)); at >= covered)
                growRun(data, n, period, at, covered, runs);
        k = std::max(k + 32, (covered + 7) & ~size_t {7}); // words inside a run are not looked at
    }
    return findRunsScalar(data, n, period, k, covered, std::move(runs));
}
#endif

std::vector<Run> findRuns(uint8_t const* data, size_t n, size_t period)
{
#if SR_PNG_X86
    if (kAvx2)
        return findRunsAvx2(data, n, period);
#endif
    return findRunsScalar(data, n, period);
}

// Adds the bytes of data[0, n) to four histograms (no store waits on the one before), one load per 8 bytes.
void countBytes(uint8_t const* data, size_t n, std::array<std::array<uint32_t, 256>, 4>& part)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
    {
        uint64_t v;
        std::memcpy(&v, data + i, 8);
        ++part[0][v & 0xff];
        ++part[1][(v >> 8) & 0xff];
        ++part[2][(v >> 16) & 0xff];
        ++part[3][(v >> 24) & 0xff];
        ++part[0][(v >> 32) & 0xff];
        ++part[1][(v >> 40) & 0xff];
        ++part[2][(v >> 48) & 0xff];
        ++part[3][v >> 56];
    }
    for (; i < n; ++i)
        ++part[0][data[i]];
}

// Deflate's length symbols (RFC 1951, 3.2.5) for a match of 3..258 bytes: symbol, extra bits and their value.
struct LengthCode
{
    uint16_t symbol;
    uint8_t extraBits;
    uint16_t extra;
};

std::array<LengthCode, kMaxMatch + 1> const& matchCodes()
{
    static std::array<LengthCode, kMaxMatch + 1> const table = []
    {
        constexpr std::array<int, 29> base = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59,
            67, 83, 99, 115, 131, 163, 195, 227, 258};
        constexpr std::array<int, 29> extra
            = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
        std::array<LengthCode, kMaxMatch + 1> t {};
        for (int len = 3; len <= kMaxMatch; ++len)
        {
            int code = 28;
            while (base[code] > len)
                --code;
            if (len == kMaxMatch) // 258 has a symbol of its own (285), not 284 with all extra bits set
                code = 28;
            t[len] = {static_cast<uint16_t>(257 + code), static_cast<uint8_t>(extra[code]),
                static_cast<uint16_t>(len - base[code])};
        }
        return t;
    }();
    return table;
}

// The matches a run becomes: up to 258 bytes each, none under 3 (what is left, 0-2 bytes, stays literals). Calls
// match(length) for each and returns the literals left.
template <typename F>
size_t splitRun(size_t rest, F&& match)
{
    while (rest >= 3)
    {
        size_t m = std::min<size_t>(rest, kMaxMatch);
        if (rest - m > 0 && rest - m < 3)
            m -= 3; // leaves 3 or more for the next match
        match(m);
        rest -= m;
    }
    return rest;
}

// Literals with the writer's state on locals (stores through `out` could alias its members) and no branch per word:
// three codes (<= 45 bits) join the < 8 pending bits, all 8 bytes are stored and the whole bytes kept (the output's
// bound leaves room for the overhang).
void writeLiterals(BitWriter& w, uint32_t const* codes, uint8_t const* data, size_t n)
{
    while (w.count >= 8)
    {
        *w.out++ = static_cast<uint8_t>(w.bits);
        w.bits >>= 8;
        w.count -= 8;
    }
    uint64_t bits = w.bits;
    int count = w.count;
    uint8_t* o = w.out;
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
    {
        uint32_t const a = codes[data[i]], b = codes[data[i + 1]], c = codes[data[i + 2]], d = codes[data[i + 3]];
        // the four codes joined apart from `count`, so the chain through it is one shift and one add
        int const la = static_cast<int>(a & 15), lab = la + static_cast<int>(b & 15);
        int const labc = lab + static_cast<int>(c & 15);
        uint64_t const abcd = (a >> 4) | static_cast<uint64_t>(b >> 4) << la | static_cast<uint64_t>(c >> 4) << lab
            | static_cast<uint64_t>(d >> 4) << labc;
        bits |= abcd << count;
        count += labc + static_cast<int>(d & 15);
        std::memcpy(o, &bits, 8); // little-endian hosts: deflate's byte order
        o += count >> 3;
        bits >>= count & ~7;
        count &= 7;
    }
    w.bits = bits;
    w.count = count;
    w.out = o;
    for (; i < n; ++i)
        w.put(codes[data[i]] >> 4, static_cast<int>(codes[data[i]] & 15));
}

// `data` as a dynamic block: literals and run matches under codes made for this band, and the block's exact size.
struct DynamicBlock
{
    std::vector<Run> runs;
    std::array<uint8_t, kSymbols + kDistances> lengths {};
    std::array<uint32_t, kSymbols> codes {};
    std::array<uint8_t, 19> lengthLengths {};
    std::array<uint32_t, 19> lengthCodes {};
    int lengthCount = 19; // code-length code lengths sent (HCLEN + 4): the trailing zeros in kLengthOrder are not
    uint64_t bits = 0;

    size_t period;

    DynamicBlock(uint8_t const* data, size_t n, int bpp)
        : runs(findRuns(data, n, static_cast<size_t>(bpp)))
        , period(static_cast<size_t>(bpp))
    {
        std::array<std::array<uint32_t, 256>, 4> part {};
        uint64_t extraBits = 0;
        std::array<uint32_t, kSymbols> freq {};
        auto const& table = matchCodes();
        size_t pos = 0;
        for (Run const& r : runs)
        {
            countBytes(data + pos, r.start - pos, part);
            size_t const left = splitRun(r.length,
                [&](size_t m)
                {
                    ++freq[table[m].symbol];
                    extraBits += table[m].extraBits + kDistanceBits;
                });
            countBytes(data + r.start + r.length - left, left, part);
            pos = r.start + r.length;
        }
        countBytes(data + pos, n - pos, part);
        for (int v = 0; v < 256; ++v)
            freq[v] = part[0][v] + part[1][v] + part[2][v] + part[3][v];
        freq[kEndOfBlock] = 1;
        codeLengths(freq.data(), kSymbols, kMaxBits, lengths.data());
        std::fill(lengths.begin() + kSymbols, lengths.end(), static_cast<uint8_t>(kDistanceBits));
        canonicalCodes(lengths.data(), kSymbols, codes.data());

        std::array<uint32_t, 19> lengthFreq {};
        for (uint8_t len : lengths)
            ++lengthFreq[len];
        codeLengths(lengthFreq.data(), 19, kMaxLengthBits, lengthLengths.data());
        canonicalCodes(lengthLengths.data(), 19, lengthCodes.data());
        while (lengthCount > 4 && lengthLengths[kLengthOrder[lengthCount - 1]] == 0)
            --lengthCount;

        bits = 3 + 5 + 5 + 4 + 3 * static_cast<uint64_t>(lengthCount) + extraBits;
        for (uint8_t len : lengths)
            bits += lengthLengths[len];
        for (int s = 0; s < kSymbols; ++s)
            bits += static_cast<uint64_t>(freq[s]) * lengths[s];
    }

    void write(BitWriter& w, bool last, uint8_t const* data, size_t n) const
    {
        w.put(last ? 1 : 0, 1);
        w.put(2, 2); // dynamic Huffman codes
        w.put(kSymbols - 257, 5);
        w.put(kDistances - 1, 5);
        w.put(static_cast<uint32_t>(lengthCount - 4), 4);
        for (int i = 0; i < lengthCount; ++i)
            w.put(lengthLengths[kLengthOrder[i]], 3);
        for (uint8_t len : lengths)
            w.put(lengthCodes[len] >> 4, static_cast<int>(lengthCodes[len] & 15));
        auto const& table = matchCodes();
        // the distance of one pixel (1-4 bytes) is distance code period - 1, each code kDistanceBits long
        uint32_t const distance = reverseBits(static_cast<uint32_t>(period - 1), kDistanceBits);
        size_t pos = 0;
        for (Run const& r : runs)
        {
            writeLiterals(w, codes.data(), data + pos, r.start - pos);
            size_t const left = splitRun(r.length,
                [&](size_t m)
                {
                    LengthCode const& c = table[m];
                    w.put(codes[c.symbol] >> 4, static_cast<int>(codes[c.symbol] & 15));
                    w.put(c.extra, c.extraBits);
                    w.put(distance, kDistanceBits);
                });
            writeLiterals(w, codes.data(), data + r.start + r.length - left, left);
            pos = r.start + r.length;
        }
        writeLiterals(w, codes.data(), data + pos, n - pos);
        w.put(codes[kEndOfBlock] >> 4, static_cast<int>(codes[kEndOfBlock] & 15));
    }
};

uint64_t storedBits(size_t n)
{
    return 8 * (n + 5 * std::max<size_t>(1, (n + kStoredMax - 1) / kStoredMax)) + 8; // + the pad to a byte
}

void writeStored(BitWriter& w, bool last, uint8_t const* data, size_t n)
{
    do
    {
        size_t const len = std::min(n, kStoredMax);
        n -= len;
        w.put(last && n == 0 ? 1 : 0, 1);
        w.put(0, 2); // stored
        w.align();
        uint8_t const head[4] = {static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(~len),
            static_cast<uint8_t>(~len >> 8)};
        std::memcpy(w.out, head, 4);
        std::memcpy(w.out + 4, data, len);
        w.out += 4 + len;
        data += len;
    } while (n > 0);
}

size_t rowBytes(int w, int channels)
{
    return 1 + static_cast<size_t>(w) * static_cast<size_t>(channels);
}

size_t bandRows(int h, int w, int channels)
{
    return std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(h), kBandBytes / rowBytes(w, channels)));
}

// Undoes one row's filter into `out` (the row's samples), given the unfiltered row above (`prior`: zeros for the
// first row), for `Bpp` bytes per pixel: the left neighbours carried in registers (the serial filters, Sub, Average
// and Paeth, were a store and a reload per byte). False for a filter type PNG does not have.
template <size_t Bpp>
bool unfilterRowBpp(uint8_t filter, uint8_t const* f, uint8_t const* prior, size_t n, uint8_t* out)
{
    std::array<uint8_t, Bpp> left {}, upLeft {}; // a, and c (Paeth's), per channel; 0 before the first pixel
    switch (filter)
    {
    case 0: std::memcpy(out, f, n); return true;
    case 1:
        for (size_t x = 0; x < n; x += Bpp)
            for (size_t c = 0; c < Bpp; ++c)
                out[x + c] = left[c] = static_cast<uint8_t>(f[x + c] + left[c]);
        return true;
    case 2:
        for (size_t x = 0; x < n; ++x)
            out[x] = static_cast<uint8_t>(f[x] + prior[x]);
        return true;
    case 3:
        for (size_t x = 0; x < n; x += Bpp)
            for (size_t c = 0; c < Bpp; ++c)
                out[x + c] = left[c] = static_cast<uint8_t>(f[x + c] + ((left[c] + prior[x + c]) >> 1));
        return true;
    case 4:
        for (size_t x = 0; x < n; x += Bpp)
            for (size_t c = 0; c < Bpp; ++c)
            {
                int const a = left[c], b = prior[x + c], cc = upLeft[c];
                int const pa = std::abs(b - cc), pb = std::abs(a - cc), pc = std::abs(a + b - 2 * cc);
                out[x + c] = left[c] = static_cast<uint8_t>(f[x + c] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : cc));
                upLeft[c] = static_cast<uint8_t>(b);
            }
        return true;
    default: return false;
    }
}

bool unfilterRow(uint8_t filter, uint8_t const* f, uint8_t const* prior, size_t n, size_t bpp, uint8_t* out)
{
    switch (bpp)
    {
    case 1: return unfilterRowBpp<1>(filter, f, prior, n, out);
    case 2: return unfilterRowBpp<2>(filter, f, prior, n, out);
    case 3: return unfilterRowBpp<3>(filter, f, prior, n, out);
    default: return unfilterRowBpp<4>(filter, f, prior, n, out);
    }
}

} // namespace

extern "C"
{
    int sr_png_set_simd(int level)
    {
        int const used = std::clamp(level, static_cast<int>(kSimdSse2), kCpuSimd);
        kSsse3 = used >= kSimdSsse3;
        kAvx2 = used >= kSimdAvx2;
        return used;
    }

    size_t sr_png_idat_bound(int h, int w, int channels)
    {
        if (h <= 0 || w <= 0 || channels <= 0)
            return 0;
        size_t const filtered = static_cast<size_t>(h) * rowBytes(w, channels);
        size_t const bands = (static_cast<size_t>(h) + bandRows(h, w, channels) - 1) / bandRows(h, w, channels);
        // zlib header and checksum; per band, stored blocks at worst (plus a byte of bits before each)
        // and the 8 bytes the Huffman loop stores past its last whole byte
        return 2 + 4 + filtered + bands * 6 + 5 * (filtered / kStoredMax + 1) + 8 + 8;
    }

    int sr_png_idat_u8(uint8_t const* pixels, int h, int w, int channels, int swapRedBlueIn, uint8_t* out,
        size_t capacity, size_t* written)
    {
        if (h <= 0 || w <= 0 || (channels != 1 && channels != 2 && channels != 3 && channels != 4))
            return sr::cpuFail(SR_ERR_INVALID_ARGUMENT, "png_idat_u8: needs a non-empty image of 1-4 channels");
        if (pixels == nullptr || out == nullptr || written == nullptr)
            return sr::cpuFail(SR_ERR_NULL_POINTER, "png_idat_u8: null buffer");
        if (capacity < sr_png_idat_bound(h, w, channels))
            return sr::cpuFail(SR_ERR_INVALID_ARGUMENT, "png_idat_u8: output smaller than sr_png_idat_bound");
        bool const swap = swapRedBlueIn != 0 && channels >= 3;
        try
        {
            size_t const row = rowBytes(w, channels), samples = row - 1, rows = bandRows(h, w, channels);
            std::vector<uint8_t> band(rows * row), spare(row);
            BitWriter bw {out + 2};
            out[0] = 0x78; // deflate, 32 KiB window
            out[1] = 0x01; // (0x7801 % 31 == 0), fastest
            uint32_t adler = 1;
            for (size_t y0 = 0; y0 < static_cast<size_t>(h); y0 += rows)
            {
                size_t const m = std::min(rows, static_cast<size_t>(h) - y0);
                for (size_t r = 0; r < m; ++r)
                {
                    size_t const y = y0 + r;
                    uint8_t const* raw = pixels + y * samples;
                    bool const zeros = filterRow(
                        raw, y == 0 ? nullptr : raw - samples, samples, channels, band.data() + r * row, spare.data());
                    if (swap && !zeros)
                        swapRedBlue(band.data() + r * row + 1, static_cast<size_t>(w), channels);
                }
                size_t const n = m * row;
                adler = adler32(adler, band.data(), n);
                bool const last = y0 + m == static_cast<size_t>(h);
                DynamicBlock const block(band.data(), n, channels);
                if (block.bits < storedBits(n))
                    block.write(bw, last, band.data(), n);
                else
                    writeStored(bw, last, band.data(), n);
            }
            bw.align();
            uint8_t const check[4] = {static_cast<uint8_t>(adler >> 24), static_cast<uint8_t>(adler >> 16),
                static_cast<uint8_t>(adler >> 8), static_cast<uint8_t>(adler)};
            std::memcpy(bw.out, check, 4);
            *written = static_cast<size_t>(bw.out + 4 - out);
            return sr::cpuOk();
        }
        catch (std::bad_alloc const&)
        {
            return sr::cpuFail(SR_ERR_INTERNAL, "png_idat_u8: out of memory");
        }
    }

    int sr_png_unfilter_u8(uint8_t const* filtered, int h, int w, int channels, int swapRedBlueIn, uint8_t* pixels)
    {
        if (h <= 0 || w <= 0 || channels < 1 || channels > 4)
            return sr::cpuFail(SR_ERR_INVALID_ARGUMENT, "png_unfilter_u8: needs a non-empty image of 1-4 channels");
        if (filtered == nullptr || pixels == nullptr)
            return sr::cpuFail(SR_ERR_NULL_POINTER, "png_unfilter_u8: null buffer");
        size_t const samples = static_cast<size_t>(w) * static_cast<size_t>(channels);
        bool const swap = swapRedBlueIn != 0 && channels >= 3;
        try
        {
            std::vector<uint8_t> const zeros(samples); // the first row's "row above"
            for (size_t y = 0; y < static_cast<size_t>(h); ++y)
            {
                uint8_t const* f = filtered + y * (samples + 1);
                uint8_t* out = pixels + y * samples;
                if (!unfilterRow(f[0], f + 1, y == 0 ? zeros.data() : out - samples, samples,
                        static_cast<size_t>(channels), out))
                    return sr::cpuFail(SR_ERR_INVALID_ARGUMENT, "png_unfilter_u8: a row has an unknown filter type");
                if (swap && y > 0) // the row above, now that no row needs it unswapped (while it is in cache)
                    swapRedBlue(out - samples, static_cast<size_t>(w), channels);
            }
            if (swap)
                swapRedBlue(pixels + (static_cast<size_t>(h) - 1) * samples, static_cast<size_t>(w), channels);
        }
        catch (std::bad_alloc const&)
        {
            return sr::cpuFail(SR_ERR_INTERNAL, "png_unfilter_u8: out of memory");
        }
        return sr::cpuOk();
    }
}
