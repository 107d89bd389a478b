//! `tojson` as Hugging Face chat templates see it: Python's `json.dumps` (", " and ": "
//! separators, non-ASCII kept, no HTML escaping, floats as Python's `repr`).

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The `json.dumps` options transformers' `tojson` exposes.
#[derive(Debug, Clone)]
pub struct PyJsonOptions {
    /// `indent`: `None` for one line, else the text repeated per level.
    pub indent: Option<String>,
    /// The separator between items (`", "`, or `","` when indenting).
    pub item_sep: String,
    /// The separator between a key and its value.
    pub key_sep: String,
    /// Sort object keys.
    pub sort_keys: bool,
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
}

impl Default for PyJsonOptions {
    fn default() -> Self {
        PyJsonOptions {
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            sort_keys: false,
            ensure_ascii: false,
        }
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

impl PyJsonOptions {
    /// Reads `indent`, `separators`, `sort_keys` and `ensure_ascii` keyword arguments.
    pub fn from_kwargs(kwargs: &Kwargs) -> Result<PyJsonOptions, Error> {
        let mut o = PyJsonOptions::default();
        let indent: Option<Value> = kwargs.get("indent")?;
        if let Some(ind) = indent {
            if ind.is_none() {
            } else if let Some(s) = ind.as_str() {
                o.indent = Some(s.to_string());
            } else if let Some(n) = ind.as_i64() {
                o.indent = Some(" ".repeat(n.max(0) as usize));
            } else {
                return Err(invalid("tojson: indent must be an integer or a string"));
            }
        }
        if o.indent.is_some() {
            o.item_sep = ",".into();
        }
        let seps: Option<Value> = kwargs.get("separators")?;
        if let Some(seps) = seps.filter(|s| !s.is_none()) {
            let items: Vec<Value> = seps.try_iter()?.collect();
            match items.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    o.item_sep = a.as_str().unwrap_or_default().to_string();
                    o.key_sep = b.as_str().unwrap_or_default().to_string();
                }
                _ => return Err(invalid("tojson: separators must be a pair of strings")),
            }
        }
        o.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
        o.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
        kwargs.assert_all_used()?;
        Ok(o)
    }
}

/// Serializes `v` as Python's `json.dumps` would with these options.
pub fn dumps(v: &Value, o: &PyJsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, v, o, 0)?;
    Ok(out)
}

/// Python's `repr` of a float (what `json.dumps` writes).
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let fixed = format!("{f}");
        if fixed.contains('.') {
            fixed
        } else {
            format!("{fixed}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn newline(out: &mut String, o: &PyJsonOptions, level: usize) {
    if let Some(ind) = &o.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

/// The text Python uses for a dict key (keys are converted to strings).
fn key_text(k: &Value) -> Result<String, Error> {
    match k.kind() {
        ValueKind::String => Ok(k.as_str().unwrap_or_default().to_string()),
        ValueKind::Bool => Ok(if k.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        ValueKind::Number if k.is_integer() => Ok(k.to_string()),
        ValueKind::Number => Ok(py_float_repr(f64::try_from(k.clone())?)),
        _ => Err(invalid(format!(
            "tojson: keys must be str, int, float, bool or None, not {}",
            k.kind()
        ))),
    }
}

fn write_value(out: &mut String, v: &Value, o: &PyJsonOptions, level: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined => {
            return Err(invalid(
                "tojson: Object of type Undefined is not JSON serializable",
            ))
        }
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => out.push_str(&py_float_repr(f64::try_from(v.clone())?)),
        ValueKind::String => write_str(out, v.as_str().unwrap_or_default(), o.ensure_ascii),
        ValueKind::Map => {
            let mut pairs = Vec::new();
            for k in v.try_iter()? {
                let item = v.get_item(&k)?;
                pairs.push((key_text(&k)?, item));
            }
            if o.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if pairs.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, item)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, o, level + 1);
                write_str(out, k, o.ensure_ascii);
                out.push_str(&o.key_sep);
                write_value(out, item, o, level + 1)?;
            }
            newline(out, o, level);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, o, level + 1);
                write_value(out, item, o, level + 1)?;
            }
            newline(out, o, level);
            out.push(']');
        }
        other => {
            return Err(invalid(format!(
                "tojson: a {other} value is not JSON serializable"
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_follow_python_repr() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e300, "1.5e+300"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(py_float_repr(f), want);
        }
    }

    #[test]
    fn strings_escape_like_python() {
        let v = Value::from("a\"b\\c\nd\u{1}é😀\u{7f}");
        assert_eq!(
            dumps(&v, &PyJsonOptions::default()).unwrap(),
            "\"a\\\"b\\\\c\\nd\\u0001é😀\u{7f}\""
        );
        let ascii = PyJsonOptions {
            ensure_ascii: true,
            ..PyJsonOptions::default()
        };
        assert_eq!(
            dumps(&v, &ascii).unwrap(),
            "\"a\\\"b\\\\c\\nd\\u0001\\u00e9\\ud83d\\ude00\\u007f\""
        );
    }
}
