//! Worker tags (Celeborn 0.6's CIP-11): which workers a shuffle may use.
//!
//! A client names a tags expression (`celeborn.tags.tagsExpr`, sent as
//! RequestSlots' `tagsExpr`): tags separated by commas, every one of which a
//! worker must carry. An empty expression selects every worker. Upstream's
//! master also reads expressions from its dynamic config service and has a
//! second syntax (TagsQL); with neither here, the client's expression is the
//! one that counts, as upstream's master without a config service does.

use super::fleet::Candidate;

/// A parsed tags expression: the tags a worker must all carry.
#[derive(Debug, PartialEq, Eq)]
pub struct TagsExpr(Vec<String>);

impl TagsExpr {
    /// Splits on commas and trims each tag, dropping empty ones, so `""`
    /// and `" , "` select every worker.
    pub fn parse(expr: &str) -> Self {
        TagsExpr(
            expr.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// True when the expression names no tag.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a worker carrying `tags` is selected.
    pub fn matches(&self, tags: &[String]) -> bool {
        self.0.iter().all(|t| tags.contains(t))
    }

    /// The candidates the expression selects, in their order.
    pub fn select(&self, workers: Vec<Candidate>) -> Vec<Candidate> {
        workers
            .into_iter()
            .filter(|w| self.matches(&w.tags))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_tag_must_match() {
        let e = TagsExpr::parse("env=prod, ssd");
        assert!(e.matches(&tags(&["ssd", "env=prod", "rack-1"])));
        assert!(!e.matches(&tags(&["ssd"])));
        assert!(!e.matches(&[]));
        // Tags match whole: "env=prod" is not "env=production".
        assert!(!TagsExpr::parse("env=prod").matches(&tags(&["env=production"])));
    }

    #[test]
    fn an_empty_expression_selects_everything() {
        for expr in ["", " ", " , ,"] {
            let e = TagsExpr::parse(expr);
            assert!(e.is_empty(), "{expr:?}");
            assert!(e.matches(&[]));
        }
    }
}
