//! Formatting shared by the commands.

/// Run-length form of a size list, for runs of three or more: `1 1 16 16 16 10` →
/// `1 1 16 ×3 10`.
pub fn run_lengths(sizes: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sizes.len() {
        let mut j = i;
        while j < sizes.len() && sizes[j] == sizes[i] {
            j += 1;
        }
        match j - i {
            n @ (1 | 2) => out.extend(std::iter::repeat_n(sizes[i].to_string(), n)),
            n => out.push(format!("{} ×{n}", sizes[i])),
        }
        i = j;
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_lengths_group_repeats() {
        assert_eq!(
            run_lengths(&[1, 1, 2, 2, 16, 16, 16, 10]),
            "1 1 2 2 16 ×3 10"
        );
        assert_eq!(run_lengths(&[]), "");
    }
}
