//! The int8 dot products a scan of every row is made of, plain and with AVX2.

use super::Query;

/// The dot product of two int8 vectors.
pub(super) fn dot(q: &[i8], row: &[i8]) -> i32 {
    q.iter()
        .zip(row)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

/// `dot` with AVX2, 32 values per multiply-add: |q| (unsigned) times the row's values with
/// q's signs (`sign`), adjacent products summed into 16 bits. Exact while no value is -128:
/// a pair of products is at most 2 · 127 · 127 = 32,258, under i16's 32,767; a request's
/// values come from `Model::embed` and a row file holding -128 is refused when read.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_avx2(q: &Query, row: &[i8]) -> i32 {
    use std::arch::x86_64::*;
    let n = q.vector.len().min(q.magnitude.len()).min(row.len());
    let whole = n - n % 32;
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    while i < whole {
        // SAFETY: i + 32 <= n, within all three slices; unaligned loads.
        unsafe {
            let r = _mm256_loadu_si256(row.as_ptr().add(i).cast());
            let sign = _mm256_loadu_si256(q.vector.as_ptr().add(i).cast());
            let size = _mm256_loadu_si256(q.magnitude.as_ptr().add(i).cast());
            acc = madd32(acc, r, sign, size);
        }
        i += 32;
    }
    let half = _mm_add_epi32(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256::<1>(acc),
    );
    let quarter = _mm_add_epi32(half, _mm_shuffle_epi32::<0b01_00_11_10>(half));
    let lane = _mm_add_epi32(quarter, _mm_shuffle_epi32::<0b10_11_00_01>(quarter));
    _mm_cvtsi128_si32(lane) + dot(&q.vector[whole..n], &row[whole..n])
}

/// acc + Σ row · q over 32 values, in eight lanes of four products each: |q| (`size`,
/// unsigned) times the row's values with q's signs (`sign`), adjacent products summed into
/// 16 bits, then pairs of those into 32 (exactness: `dot_avx2`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn madd32(
    acc: std::arch::x86_64::__m256i,
    row: std::arch::x86_64::__m256i,
    sign: std::arch::x86_64::__m256i,
    size: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let pairs = _mm256_maddubs_epi16(size, _mm256_sign_epi8(row, sign));
    _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}
