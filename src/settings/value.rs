//! How a setting's type is read from a flag or an environment variable,
//! shown in the docs, and checked against its bound. One impl per type
//! that settings use; the config file goes through serde instead.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a setting's value must satisfy (besides its type).
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    /// Any value of the type.
    Any,
    /// A string that is not empty.
    NonEmpty,
    /// A number in `min..=max` (an unset optional number passes).
    Range(i128, i128),
    /// A number at least this large.
    Min(i128),
    /// One of these words.
    OneOf(&'static [&'static str]),
}

impl Bound {
    /// The bound as the docs and `--help` show it.
    pub fn describe(&self) -> String {
        match self {
            Bound::Any => String::new(),
            Bound::NonEmpty => "not empty".into(),
            Bound::Range(min, max) => format!("{min}..={max}"),
            Bound::Min(min) => format!("at least {min}"),
            Bound::OneOf(words) => words.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>().join(", "),
        }
    }
}

/// A type a setting can have.
pub trait Value: Sized {
    /// Whether the flag takes several values (repeatable, and comma-separated
    /// in one flag or environment variable).
    const LIST: bool = false;
    /// Whether the flag may stand alone (`--auth` means `--auth true`).
    const SWITCH: bool = false;
    /// Reads the flag's or the environment variable's text.
    fn parse(values: Vec<String>) -> Result<Self, String>;
    /// The value as the docs and `--help` show it.
    fn show(&self) -> String;
    /// The number a `Range` or `Min` bound compares (`None`: not set, or not a number).
    fn number(&self) -> Option<i128> {
        None
    }
    /// The text a `NonEmpty` or `OneOf` bound looks at.
    fn text(&self) -> Option<&str> {
        None
    }

    /// Checks the value against `bound`; the error names the setting.
    fn check(&self, name: &str, bound: &Bound) -> Result<(), String> {
        let fits = match bound {
            Bound::Any => true,
            Bound::NonEmpty => self.text().is_none_or(|t| !t.is_empty()),
            Bound::Range(min, max) => self.number().is_none_or(|n| (*min..=*max).contains(&n)),
            Bound::Min(min) => self.number().is_none_or(|n| n >= *min),
            Bound::OneOf(words) => self.text().is_none_or(|t| words.contains(&t)),
        };
        if fits {
            return Ok(());
        }
        Err(match bound {
            Bound::NonEmpty => format!("{name} must not be empty"),
            Bound::OneOf(_) => format!("{name} must be one of {}, got {:?}", bound.describe(), self.show()),
            _ => format!("{name} must be {}, got {}", bound.describe(), self.show()),
        })
    }
}

/// The one value of a flag that takes one.
fn single(mut values: Vec<String>) -> Result<String, String> {
    assert!(!values.is_empty(), "clap hands over at least one value");
    match values.len() {
        1 => Ok(values.remove(0)),
        n => Err(format!("takes one value, got {n}")),
    }
}

macro_rules! number_value {
    ($($ty:ty),*) => {$(
        impl Value for $ty {
            fn parse(values: Vec<String>) -> Result<Self, String> {
                let text = single(values)?;
                text.trim().parse().map_err(|e| format!("{text:?} is not a number of this setting's type ({}): {e}", stringify!($ty)))
            }
            fn show(&self) -> String {
                self.to_string()
            }
            fn number(&self) -> Option<i128> {
                Some(*self as i128)
            }
        }
    )*};
}

number_value!(u64, u32, usize, i32);

impl Value for bool {
    const SWITCH: bool = true;
    fn parse(values: Vec<String>) -> Result<Self, String> {
        let text = single(values)?;
        text.parse().map_err(|_| format!("must be true or false, got {text:?}"))
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl Value for String {
    fn parse(values: Vec<String>) -> Result<Self, String> {
        single(values)
    }
    fn show(&self) -> String {
        self.clone()
    }
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl Value for PathBuf {
    fn parse(values: Vec<String>) -> Result<Self, String> {
        single(values).map(PathBuf::from)
    }
    fn show(&self) -> String {
        self.display().to_string()
    }
}

impl<T: Value> Value for Option<T> {
    fn parse(values: Vec<String>) -> Result<Self, String> {
        T::parse(values).map(Some)
    }
    fn show(&self) -> String {
        self.as_ref().map_or_else(|| "none".into(), T::show)
    }
    fn number(&self) -> Option<i128> {
        self.as_ref().and_then(T::number)
    }
    fn text(&self) -> Option<&str> {
        self.as_ref().and_then(T::text)
    }
}

impl Value for Vec<String> {
    const LIST: bool = true;
    fn parse(values: Vec<String>) -> Result<Self, String> {
        Ok(values)
    }
    fn show(&self) -> String {
        if self.is_empty() {
            return "none".into();
        }
        self.join(",")
    }
}

/// `KEY=VALUE` pairs (object store options).
impl Value for BTreeMap<String, String> {
    const LIST: bool = true;
    fn parse(values: Vec<String>) -> Result<Self, String> {
        values
            .into_iter()
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
                _ => Err(format!("takes KEY=VALUE, got {pair:?}")),
            })
            .collect()
    }
    fn show(&self) -> String {
        if self.is_empty() {
            return "none".into();
        }
        self.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_show_and_check_their_bounds() {
        assert_eq!(u64::parse(vec!["42".into()]), Ok(42));
        assert!(u64::parse(vec!["-1".into()]).unwrap_err().contains("not a number"));
        assert!(u64::parse(vec!["1".into(), "2".into()]).unwrap_err().contains("one value"));
        assert_eq!(bool::parse(vec!["false".into()]), Ok(false));
        assert!(bool::parse(vec!["no".into()]).is_err());
        assert_eq!(Option::<u64>::parse(vec!["7".into()]), Ok(Some(7)));
        assert_eq!(Option::<u64>::None.show(), "none");
        let map = BTreeMap::<String, String>::parse(vec!["a=1".into(), "b=x=y".into()]).unwrap();
        assert_eq!(map.show(), "a=1,b=x=y");
        assert!(BTreeMap::<String, String>::parse(vec!["=1".into()]).is_err());
        assert!(BTreeMap::<String, String>::parse(vec!["novalue".into()]).is_err());
        assert_eq!(5u64.check("n", &Bound::Range(1, 10)), Ok(()));
        assert_eq!(11u64.check("n", &Bound::Range(1, 10)), Err("n must be 1..=10, got 11".into()));
        assert_eq!(Option::<u64>::None.check("n", &Bound::Range(1, 10)), Ok(()), "unset passes");
        assert_eq!(0usize.check("n", &Bound::Min(1)), Err("n must be at least 1, got 0".into()));
        assert_eq!((-1i32).check("n", &Bound::Range(1, 16)), Err("n must be 1..=16, got -1".into()));
        assert_eq!(String::new().check("s", &Bound::NonEmpty), Err("s must not be empty".into()));
        let words = Bound::OneOf(&["text", "json"]);
        assert_eq!("json".to_string().check("f", &words), Ok(()));
        assert_eq!("xml".to_string().check("f", &words), Err("f must be one of `text`, `json`, got \"xml\"".into()));
    }
}
