//! What one soak application writes: its partitions, how many records each
//! gets (one partition 20-50x the others in a skewed application) and how
//! big they are, drawn from the run's seeded generator.

use super::record;

/// A seeded splitmix64 generator: a run's choices follow from its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

#[derive(Debug, Clone)]
pub struct AppSpec {
    /// The application's number in the run: the high half of its record ids.
    pub app_no: u32,
    /// Records per partition (partition i gets `records[i]`).
    pub records: Vec<u32>,
    /// Payload bytes of every record.
    pub record_len: usize,
    /// Concurrent writers (map tasks).
    pub writers: usize,
    /// The skewed partition's factor over the others (1: no skew).
    pub skew: u32,
}

impl AppSpec {
    /// Mostly small applications (a steady stream of them), one in four
    /// bigger and skewed: its partition 0 gets 20-50x the records of the
    /// others.
    pub fn draw(rng: &mut Rng, app_no: u32) -> AppSpec {
        let big = rng.range(0, 3) == 0;
        let (partitions, per_partition, record_len) = if big {
            (16, rng.range(40, 80) as u32, rng.range(2048, 8192) as usize)
        } else {
            (
                rng.range(2, 8) as i32,
                rng.range(10, 40) as u32,
                rng.range(100, 2048) as usize,
            )
        };
        let skew = if big { rng.range(20, 50) as u32 } else { 1 };
        let mut records = vec![per_partition; partitions as usize];
        records[0] *= skew;
        AppSpec {
            app_no,
            records,
            record_len,
            writers: rng.range(2, 4) as usize,
            skew,
        }
    }

    pub fn partitions(&self) -> i32 {
        self.records.len() as i32
    }

    /// Every record of writer `w`: (partition, record id), records dealt
    /// round-robin to writers.
    pub fn records_of(&self, w: usize) -> Vec<(i32, u64)> {
        let mut out = Vec::new();
        let mut seq = 0u32;
        for (p, n) in self.records.iter().enumerate() {
            for _ in 0..*n {
                if seq as usize % self.writers == w {
                    out.push((p as i32, record::record_id(self.app_no, seq)));
                }
                seq += 1;
            }
        }
        out
    }

    /// Bytes of every record encoded.
    pub fn bytes(&self) -> u64 {
        let n: u64 = self.records.iter().map(|r| u64::from(*r)).sum();
        n * (self.record_len + record::OVERHEAD) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_share_every_record_once() {
        let mut rng = Rng::new(42);
        for app_no in 0..20 {
            let spec = AppSpec::draw(&mut rng, app_no);
            let mut all: Vec<u64> = (0..spec.writers)
                .flat_map(|w| spec.records_of(w))
                .map(|(_, id)| id)
                .collect();
            let total: u32 = spec.records.iter().sum();
            assert_eq!(all.len(), total as usize);
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), total as usize, "ids are unique");
            assert!(all.iter().all(|id| record::app_of(*id) == app_no));
            if spec.skew > 1 {
                assert!(spec.records[0] >= 20 * spec.records[1]);
            }
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_applications() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for n in 0..10 {
            let (x, y) = (AppSpec::draw(&mut a, n), AppSpec::draw(&mut b, n));
            assert_eq!((x.records, x.record_len), (y.records, y.record_len));
        }
    }
}
