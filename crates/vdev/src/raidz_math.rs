//! RAID-Z parity: P, Q and R over GF(2^8) (polynomial x^8+x^4+x^3+x^2+1, 0x11d), the
//! same algebra as RAID-Z1/2/3, written here because the pool's write speed lives here.
//!
//! With data columns D_0..D_{d-1} (a column shorter than the parity length counts as
//! zero-padded): P = XOR of D_i; Q = sum 2^(d-1-i)·D_i; R = sum 4^(d-1-i)·D_i. All
//! three are computed by Horner's rule (Q = Q·2 ^ D_i) so generation is one pass per
//! data column, and multiply-by-2 is done on 64-bit words with a SWAR trick (shift,
//! mask the carried-out high bits, xor 0x1d into those bytes) that LLVM vectorises:
//! no tables and no `unsafe` on the write path.
//!
//! Reconstruction of up to `nparity` lost columns: syndromes are formed by regenerating
//! the surviving parity rows from the surviving data (fast path above) and xoring the
//! stored parity; the small k×k system over GF(2^8) is inverted once per call, then
//! applied with one 256-entry multiplication table per coefficient. Lost parity is
//! regenerated last. `reference` is a slow byte-at-a-time version the tests compare
//! against for every width and every combination of lost columns.

pub const MAX_PARITY: usize = 3;

#[derive(Debug, PartialEq, Eq)]
pub enum ReconstructError {
    TooManyMissing { missing: usize, nparity: usize },
    BadColumn(String),
}

const POLY: u16 = 0x11d;

struct Tables {
    exp: [u8; 512],
    log: [u8; 256],
}

const fn build_tables() -> Tables {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    while i < 512 {
        exp[i] = exp[i - 255];
        i += 1;
    }
    Tables { exp, log }
}

static TABLES: Tables = build_tables();

pub fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    TABLES.exp[TABLES.log[a as usize] as usize + TABLES.log[b as usize] as usize]
}

pub fn gf_inv(a: u8) -> u8 {
    assert!(a != 0, "zero has no inverse");
    TABLES.exp[255 - TABLES.log[a as usize] as usize]
}

pub fn gf_pow(a: u8, n: usize) -> u8 {
    let mut r = 1u8;
    for _ in 0..n {
        r = gf_mul(r, a);
    }
    r
}

/// Generator of parity row `j`: 1 for P, 2 for Q, 4 for R.
fn generator(j: usize) -> u8 {
    [1u8, 2, 4][j]
}

/// Coefficient of data column `i` (of `d`) in parity row `j`.
fn coef(j: usize, i: usize, d: usize) -> u8 {
    gf_pow(generator(j), d - 1 - i)
}

#[inline(always)]
fn mul2_word(x: u64) -> u64 {
    let hi = x & 0x8080_8080_8080_8080;
    let lo = (x & 0x7f7f_7f7f_7f7f_7f7f) << 1;
    lo ^ ((hi >> 7).wrapping_mul(0x1d))
}

#[inline(always)]
fn mul2_byte(x: u8) -> u8 {
    (x << 1) ^ if x & 0x80 != 0 { 0x1d } else { 0 }
}

/// acc = acc·g ^ data (data zero-padded to acc's length), g in {1, 2, 4}.
fn horner_step(acc: &mut [u8], data: &[u8], g: u8) {
    let n = data.len();
    debug_assert!(n <= acc.len());
    let (head, tail) = acc.split_at_mut(n);
    let mut a_words = head.chunks_exact_mut(8);
    let mut d_words = data.chunks_exact(8);
    for (a, d) in (&mut a_words).zip(&mut d_words) {
        let mut x = u64::from_le_bytes(a.try_into().unwrap());
        match g {
            1 => {}
            2 => x = mul2_word(x),
            _ => x = mul2_word(mul2_word(x)),
        }
        x ^= u64::from_le_bytes(d.try_into().unwrap());
        a.copy_from_slice(&x.to_le_bytes());
    }
    for (a, d) in a_words.into_remainder().iter_mut().zip(d_words.remainder()) {
        *a = scale_byte(*a, g) ^ d;
    }
    if g != 1 {
        let mut t_words = tail.chunks_exact_mut(8);
        for a in &mut t_words {
            let mut x = u64::from_le_bytes(a.try_into().unwrap());
            x = if g == 2 {
                mul2_word(x)
            } else {
                mul2_word(mul2_word(x))
            };
            a.copy_from_slice(&x.to_le_bytes());
        }
        for a in t_words.into_remainder() {
            *a = scale_byte(*a, g);
        }
    }
}

#[inline(always)]
fn scale_byte(x: u8, g: u8) -> u8 {
    match g {
        1 => x,
        2 => mul2_byte(x),
        _ => mul2_byte(mul2_byte(x)),
    }
}

/// Parity row `j` of `data` (missing columns as `None` count as zero) into `out`.
fn generate_row(j: usize, data: &[Option<&[u8]>], out: &mut [u8]) {
    out.fill(0);
    let g = generator(j);
    for col in data {
        horner_step(out, col.unwrap_or(&[]), g);
    }
}

fn check_geometry(
    nparity: usize,
    data_lens: &[usize],
    parity_lens: &[usize],
) -> Result<usize, ReconstructError> {
    if !(1..=MAX_PARITY).contains(&nparity) {
        return Err(ReconstructError::BadColumn(format!(
            "nparity {nparity} not in 1..=3"
        )));
    }
    if parity_lens.len() != nparity {
        return Err(ReconstructError::BadColumn(format!(
            "{} parity columns for nparity {nparity}",
            parity_lens.len()
        )));
    }
    if data_lens.is_empty() {
        return Err(ReconstructError::BadColumn("no data columns".into()));
    }
    let longest = *data_lens.iter().max().unwrap();
    if parity_lens.iter().any(|&l| l != longest) {
        return Err(ReconstructError::BadColumn(format!(
            "parity lengths {parity_lens:?} differ from the longest data column {longest}"
        )));
    }
    Ok(longest)
}

/// Fill `parity[0..nparity]` (each as long as the longest data column) from `data`.
pub fn generate_parity(nparity: usize, data: &[&[u8]], parity: &mut [&mut [u8]]) {
    let lens: Vec<usize> = data.iter().map(|d| d.len()).collect();
    let plens: Vec<usize> = parity.iter().map(|p| p.len()).collect();
    check_geometry(nparity, &lens, &plens).expect("parity geometry");
    let cols: Vec<Option<&[u8]>> = data.iter().map(|d| Some(*d)).collect();
    for (j, p) in parity.iter_mut().enumerate() {
        generate_row(j, &cols, p);
    }
}

/// Inverts a k×k matrix over GF(2^8) (Gauss-Jordan); `None` if singular.
fn invert(mut m: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    let k = m.len();
    let mut inv: Vec<Vec<u8>> = (0..k)
        .map(|i| (0..k).map(|j| (i == j) as u8).collect())
        .collect();
    for col in 0..k {
        let pivot = (col..k).find(|&r| m[r][col] != 0)?;
        m.swap(col, pivot);
        inv.swap(col, pivot);
        let f = gf_inv(m[col][col]);
        for x in 0..k {
            m[col][x] = gf_mul(m[col][x], f);
            inv[col][x] = gf_mul(inv[col][x], f);
        }
        for r in 0..k {
            if r != col && m[r][col] != 0 {
                let f = m[r][col];
                for x in 0..k {
                    let a = gf_mul(f, m[col][x]);
                    let b = gf_mul(f, inv[col][x]);
                    m[r][x] ^= a;
                    inv[r][x] ^= b;
                }
            }
        }
    }
    Some(inv)
}

fn mul_table(c: u8) -> [u8; 256] {
    let mut t = [0u8; 256];
    for (x, slot) in t.iter_mut().enumerate() {
        *slot = gf_mul(c, x as u8);
    }
    t
}

fn validate_missing(
    nparity: usize,
    ncols: usize,
    missing: &[usize],
) -> Result<(), ReconstructError> {
    if missing.len() > nparity {
        return Err(ReconstructError::TooManyMissing {
            missing: missing.len(),
            nparity,
        });
    }
    for (i, &m) in missing.iter().enumerate() {
        if m >= ncols {
            return Err(ReconstructError::BadColumn(format!(
                "missing column {m} out of range"
            )));
        }
        if missing[..i].contains(&m) {
            return Err(ReconstructError::BadColumn(format!(
                "missing column {m} listed twice"
            )));
        }
    }
    Ok(())
}

/// `cols` = parity columns then data columns, at their true lengths. Rebuilds the
/// columns listed in `missing` (at most `nparity`) in place.
pub fn reconstruct(
    nparity: usize,
    cols: &mut [&mut [u8]],
    missing: &[usize],
) -> Result<(), ReconstructError> {
    if cols.len() <= nparity {
        return Err(ReconstructError::BadColumn("no data columns".into()));
    }
    let lens: Vec<usize> = cols.iter().map(|c| c.len()).collect();
    let longest = check_geometry(nparity, &lens[nparity..], &lens[..nparity])?;
    validate_missing(nparity, cols.len(), missing)?;
    let d = cols.len() - nparity;
    let missing_data: Vec<usize> = missing
        .iter()
        .filter(|&&m| m >= nparity)
        .map(|&m| m - nparity)
        .collect();
    let missing_parity: Vec<usize> = missing.iter().filter(|&&m| m < nparity).copied().collect();

    if !missing_data.is_empty() {
        let rows: Vec<usize> = (0..nparity)
            .filter(|j| !missing_parity.contains(j))
            .take(missing_data.len())
            .collect();
        if rows.len() < missing_data.len() {
            return Err(ReconstructError::TooManyMissing {
                missing: missing.len(),
                nparity,
            });
        }
        // Syndromes: stored parity xor parity of the surviving data.
        let mut syndromes: Vec<Vec<u8>> = Vec::with_capacity(rows.len());
        {
            let surviving: Vec<Option<&[u8]>> = (0..d)
                .map(|i| {
                    if missing_data.contains(&i) {
                        None
                    } else {
                        Some(&*cols[nparity + i])
                    }
                })
                .collect();
            for &j in &rows {
                let mut s = vec![0u8; longest];
                generate_row(j, &surviving, &mut s);
                for (a, b) in s.iter_mut().zip(cols[j].iter()) {
                    *a ^= b;
                }
                syndromes.push(s);
            }
        }
        let matrix: Vec<Vec<u8>> = rows
            .iter()
            .map(|&j| missing_data.iter().map(|&i| coef(j, i, d)).collect())
            .collect();
        let inv =
            invert(matrix).ok_or_else(|| ReconstructError::BadColumn("singular system".into()))?;
        for (t, &i) in missing_data.iter().enumerate() {
            let out = &mut cols[nparity + i];
            out.fill(0);
            for (r, s) in syndromes.iter().enumerate() {
                let c = inv[t][r];
                if c == 0 {
                    continue;
                }
                let n = out.len();
                if c == 1 {
                    for (o, x) in out.iter_mut().zip(&s[..n]) {
                        *o ^= x;
                    }
                } else {
                    let table = mul_table(c);
                    for (o, x) in out.iter_mut().zip(&s[..n]) {
                        *o ^= table[*x as usize];
                    }
                }
            }
        }
    }
    if !missing_parity.is_empty() {
        let data: Vec<Vec<u8>> = cols[nparity..].iter().map(|c| c.to_vec()).collect();
        let refs: Vec<Option<&[u8]>> = data.iter().map(|c| Some(&c[..])).collect();
        for &j in &missing_parity {
            generate_row(j, &refs, cols[j]);
        }
    }
    Ok(())
}

/// Slow, obviously correct versions for cross-checking.
pub mod reference {
    use super::*;

    pub fn generate_parity(nparity: usize, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        let d = data.len();
        let len = parity[0].len();
        for (j, p) in parity.iter_mut().enumerate().take(nparity) {
            for x in 0..len {
                let mut acc = 0u8;
                for (i, col) in data.iter().enumerate() {
                    let byte = col.get(x).copied().unwrap_or(0);
                    acc ^= gf_mul(coef(j, i, d), byte);
                }
                p[x] = acc;
            }
        }
    }

    pub fn reconstruct(
        nparity: usize,
        cols: &mut [&mut [u8]],
        missing: &[usize],
    ) -> Result<(), ReconstructError> {
        validate_missing(nparity, cols.len(), missing)?;
        let d = cols.len() - nparity;
        let len = cols[0].len();
        let unknown: Vec<usize> = missing
            .iter()
            .filter(|&&m| m >= nparity)
            .map(|&m| m - nparity)
            .collect();
        let rows: Vec<usize> = (0..nparity)
            .filter(|j| !missing.contains(j))
            .take(unknown.len())
            .collect();
        if rows.len() < unknown.len() {
            return Err(ReconstructError::TooManyMissing {
                missing: missing.len(),
                nparity,
            });
        }
        for x in 0..len {
            // Solve sum_t coef(j, u_t) * D_{u_t}[x] = P_j[x] ^ sum_known coef * D by
            // Gaussian elimination on an augmented matrix, one byte position at a time.
            let k = unknown.len();
            let mut aug: Vec<Vec<u8>> = rows
                .iter()
                .map(|&j| {
                    let mut rhs = cols[j][x];
                    for i in 0..d {
                        if !unknown.contains(&i) {
                            rhs ^= gf_mul(
                                coef(j, i, d),
                                cols[nparity + i].get(x).copied().unwrap_or(0),
                            );
                        }
                    }
                    let mut row: Vec<u8> = unknown.iter().map(|&u| coef(j, u, d)).collect();
                    row.push(rhs);
                    row
                })
                .collect();
            for c in 0..k {
                let p = (c..k).find(|&r| aug[r][c] != 0).expect("nonsingular");
                aug.swap(c, p);
                let f = gf_inv(aug[c][c]);
                for v in aug[c].iter_mut() {
                    *v = gf_mul(*v, f);
                }
                for r in 0..k {
                    if r != c && aug[r][c] != 0 {
                        let f = aug[r][c];
                        let pivot_row = aug[c].clone();
                        for (v, pv) in aug[r].iter_mut().zip(pivot_row) {
                            *v ^= gf_mul(f, pv);
                        }
                    }
                }
            }
            for (t, &u) in unknown.iter().enumerate() {
                if x < cols[nparity + u].len() {
                    cols[nparity + u][x] = aug[t][k];
                }
            }
        }
        let missing_parity: Vec<usize> =
            missing.iter().filter(|&&m| m < nparity).copied().collect();
        if !missing_parity.is_empty() {
            let data: Vec<Vec<u8>> = cols[nparity..].iter().map(|c| c.to_vec()).collect();
            let refs: Vec<&[u8]> = data.iter().map(|c| &c[..]).collect();
            let mut all: Vec<Vec<u8>> = vec![vec![0u8; len]; nparity];
            {
                let mut prefs: Vec<&mut [u8]> = all.iter_mut().map(|p| &mut p[..]).collect();
                generate_parity(nparity, &refs, &mut prefs);
            }
            for j in missing_parity {
                cols[j].copy_from_slice(&all[j]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize == k {
                out.push((0..n).filter(|i| mask & (1 << i) != 0).collect());
            }
        }
        out
    }

    /// Columns for a stripe: data lengths vary by one "sector" like RAID-Z's.
    fn stripe(nparity: usize, width: usize, sector: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
        let d = width - nparity;
        let long = 1 + (rng.next() % 3) as usize;
        let long_cols = 1 + (rng.next() as usize % d);
        let data: Vec<Vec<u8>> = (0..d)
            .map(|i| {
                let sectors = if i < long_cols { long } else { long - 1 };
                (0..sectors * sector).map(|_| rng.next() as u8).collect()
            })
            .collect();
        let plen = long * sector;
        let mut parity = vec![vec![0u8; plen]; nparity];
        {
            let drefs: Vec<&[u8]> = data.iter().map(|c| &c[..]).collect();
            let mut prefs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
            generate_parity(nparity, &drefs, &mut prefs);
        }
        // Cross-check generation against the reference.
        let mut ref_parity = vec![vec![0u8; plen]; nparity];
        {
            let drefs: Vec<&[u8]> = data.iter().map(|c| &c[..]).collect();
            let mut prefs: Vec<&mut [u8]> = ref_parity.iter_mut().map(|p| &mut p[..]).collect();
            reference::generate_parity(nparity, &drefs, &mut prefs);
        }
        assert_eq!(parity, ref_parity, "fast and reference parity differ");
        parity.into_iter().chain(data).collect()
    }

    #[test]
    fn every_width_every_loss_combination() {
        let mut rng = Rng(1);
        let mut checked = 0;
        for nparity in 1..=3 {
            for width in 3..=16 {
                if width <= nparity {
                    continue;
                }
                let original = stripe(nparity, width, 24, &mut rng);
                for lost in 1..=nparity {
                    for missing in subsets(width, lost) {
                        for fast in [true, false] {
                            let mut cols = original.clone();
                            for &m in &missing {
                                for b in cols[m].iter_mut() {
                                    *b = rng.next() as u8;
                                }
                            }
                            let mut refs: Vec<&mut [u8]> =
                                cols.iter_mut().map(|c| &mut c[..]).collect();
                            if fast {
                                reconstruct(nparity, &mut refs, &missing).unwrap();
                            } else {
                                reference::reconstruct(nparity, &mut refs, &missing).unwrap();
                            }
                            assert_eq!(
                                cols, original,
                                "nparity {nparity} width {width} missing {missing:?}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn too_many_missing_is_an_error() {
        let mut rng = Rng(2);
        let mut cols = stripe(2, 6, 16, &mut rng);
        let mut refs: Vec<&mut [u8]> = cols.iter_mut().map(|c| &mut c[..]).collect();
        assert_eq!(
            reconstruct(2, &mut refs, &[0, 3, 4]),
            Err(ReconstructError::TooManyMissing {
                missing: 3,
                nparity: 2
            })
        );
        assert!(reconstruct(2, &mut refs, &[3, 3]).is_err());
        assert!(reconstruct(2, &mut refs, &[9]).is_err());
    }

    #[test]
    fn field_laws() {
        for a in 1..=255u8 {
            assert_eq!(gf_mul(a, gf_inv(a)), 1);
            assert_eq!(mul2_byte(a), gf_mul(a, 2));
        }
        let x = 0x0123_4567_89ab_cdefu64;
        let bytes = x.to_le_bytes().map(mul2_byte);
        assert_eq!(mul2_word(x), u64::from_le_bytes(bytes));
    }

    proptest! {
        #[test]
        fn random_stripes_round_trip(seed in any::<u64>(), nparity in 1usize..=3, width in 3usize..=12, sector in 1usize..40) {
            prop_assume!(width > nparity);
            let mut rng = Rng(seed);
            let original = stripe(nparity, width, sector, &mut rng);
            let lost = 1 + (rng.next() as usize % nparity);
            let mut missing: Vec<usize> = Vec::new();
            while missing.len() < lost {
                let m = rng.next() as usize % width;
                if !missing.contains(&m) { missing.push(m); }
            }
            let mut cols = original.clone();
            for &m in &missing { cols[m].fill(0xEE); }
            let mut refs: Vec<&mut [u8]> = cols.iter_mut().map(|c| &mut c[..]).collect();
            reconstruct(nparity, &mut refs, &missing).unwrap();
            prop_assert_eq!(cols, original);
        }
    }
}
