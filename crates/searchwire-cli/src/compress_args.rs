//! `--compress[=MIN_BYTES]`, shared by `request`, `ingest` and `relay` (its upstream client):
//! request bodies gzipped, gzip answers asked for (`ClientBuilder::compress_requests`).

use clap::Args;

/// The compression flag.
#[derive(Debug, Args)]
pub struct CompressArgs {
    #[arg(
        long,
        value_name = "MIN_BYTES",
        num_args = 0..=1,
        require_equals = true,
        help = COMPRESS_HELP
    )]
    pub compress: Option<Option<usize>>,
}

const COMPRESS_HELP: &str = "Gzip request bodies of at least MIN_BYTES (default 1024: a smaller \
body fits one TCP segment anyway) and ask for gzip answers, inflated within the response limit. \
Off by default: on a fast link the CPU costs more than the bytes saved (docs/benchmarks.md, \
\"Compressed requests\"); across a slow or metered network bulk bodies shrink 5-10x";

impl CompressArgs {
    /// `b` with request compression when the flag is given.
    pub fn apply(&self, b: searchwire::ClientBuilder) -> searchwire::ClientBuilder {
        match self.compress {
            None => b,
            Some(min) => {
                b.compress_requests(min.unwrap_or(searchwire::explain::COMPRESS_MIN_BYTES))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        c: CompressArgs,
    }

    #[test]
    fn the_flag_takes_an_optional_threshold() {
        let parse = |args: &[&str]| {
            Cmd::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
                .map(|c| c.c.compress)
        };
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(parse(&["--compress"]).unwrap(), Some(None));
        assert_eq!(parse(&["--compress=0"]).unwrap(), Some(Some(0)));
        assert_eq!(parse(&["--compress=4096"]).unwrap(), Some(Some(4096)));
        assert!(parse(&["--compress=lots"]).is_err());
    }
}
