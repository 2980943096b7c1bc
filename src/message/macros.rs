//! Declarative helpers for the contract's two kinds of open vocabulary: string enums whose
//! unknown values survive as `Other(String)`, and tagged unions whose unknown kinds survive as
//! `Other(Map)` holding the whole JSON object.

/// Declares a string enum with an `Other(String)` arm.
///
/// Known values serialise as their wire spelling; any other string deserialises into `Other` and
/// serialises back unchanged.
macro_rules! open_string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value outside the known vocabulary, kept verbatim.
            Other(String),
        }

        impl $name {
            /// Every known wire spelling, in declaration order.
            pub const KNOWN: &'static [&'static str] = &[$($wire),+];

            /// The wire spelling of this value.
            #[must_use]
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $wire, )+
                    Self::Other(s) => s.as_str(),
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $( $wire => Self::$variant, )+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Ok(Self::from(s.as_ref()))
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "description": "Open vocabulary: the listed values are known, any other string is kept.",
                    "type": "string",
                    "examples": [$($wire),+]
                })
            }
        }
    };
}

/// Declares a union discriminated by a tag field (`kind` or `type`) with an `Other(Map)` arm.
///
/// A known tag deserialises strictly into its variant (so a malformed known part is an error,
/// not silently unknown); an unknown tag keeps the whole object in `Other`.
macro_rules! open_tagged_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident, tag = $tag:literal {
            $( $(#[$vmeta:meta])* $variant:ident($ty:ty) = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        #[allow(clippy::large_enum_variant)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant($ty), )+
            /// An object whose tag is outside the known vocabulary, kept verbatim.
            Other(serde_json::Map<String, serde_json::Value>),
        }

        const _: () = {
            #[derive(serde::Serialize)]
            #[serde(tag = $tag)]
            enum Borrowed<'a> {
                $( #[serde(rename = $wire)] $variant(&'a $ty), )+
            }

            #[derive(serde::Deserialize, schemars::JsonSchema)]
            #[serde(tag = $tag)]
            #[allow(dead_code, clippy::large_enum_variant)]
            enum Owned {
                $( #[serde(rename = $wire)] $variant($ty), )+
            }

            impl serde::Serialize for $name {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    match self {
                        $( Self::$variant(v) => Borrowed::$variant(v).serialize(s), )+
                        Self::Other(map) => map.serialize(s),
                    }
                }
            }

            impl<'de> serde::Deserialize<'de> for $name {
                fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    use serde::de::Error as _;
                    let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
                    let known = match map.get($tag) {
                        Some(serde_json::Value::String(t)) => [$($wire),+].contains(&t.as_str()),
                        Some(_) => return Err(D::Error::custom(concat!("`", $tag, "` must be a string"))),
                        None => return Err(D::Error::custom(concat!("missing field `", $tag, "`"))),
                    };
                    if !known {
                        return Ok(Self::Other(map));
                    }
                    match serde_json::from_value::<Owned>(serde_json::Value::Object(map)) {
                        $( Ok(Owned::$variant(v)) => Ok(Self::$variant(v)), )+
                        Err(e) => Err(D::Error::custom(e)),
                    }
                }
            }

            impl schemars::JsonSchema for $name {
                fn schema_name() -> std::borrow::Cow<'static, str> {
                    stringify!($name).into()
                }

                fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                    let known = <Owned as schemars::JsonSchema>::json_schema(generator);
                    schemars::json_schema!({
                        "anyOf": [
                            known,
                            {
                                "description": concat!("Unknown `", $tag, "`: kept and passed through."),
                                "type": "object",
                                "required": [$tag],
                                "properties": { $tag: { "type": "string", "not": { "enum": [$($wire),+] } } }
                            }
                        ]
                    })
                }
            }
        };
    };
}

pub(crate) use open_string_enum;
pub(crate) use open_tagged_enum;
