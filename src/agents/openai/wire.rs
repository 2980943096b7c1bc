//! The chat-completions wire format shared by OpenAI-compatible servers (OpenAI, Ollama, vLLM,
//! llama.cpp's server, LiteLLM): the request, the whole answer, the streamed chunks and the
//! error object. Only what switchboard reads is modelled; everything else is ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agents::assembly::ChatMessage;

/// `POST {base_url}/chat/completions`.
#[derive(Debug, Serialize)]
pub struct ChatRequest<'a> {
    /// The model.
    pub model: &'a str,
    /// The assembled conversation.
    pub messages: &'a [ChatMessage],
    /// Whether to answer with server-sent events.
    pub stream: bool,
    /// Longest answer, in tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// A whole (not streamed) answer.
#[derive(Debug, Deserialize)]
pub struct ChatCompletion {
    /// The candidates; switchboard reads the first.
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// The tokens the answer took, when the server says.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// The tokens one answer took (`usage`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    #[serde(default)]
    pub completion_tokens: u64,
}

/// One candidate of a whole answer.
#[derive(Debug, Deserialize)]
pub struct Choice {
    /// What the model said.
    pub message: AssistantMessage,
}

/// The model's message.
#[derive(Debug, Default, Deserialize)]
pub struct AssistantMessage {
    /// Its text; `null` when it only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// The tools it asks to call.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A tool call in a whole answer.
#[derive(Debug, Deserialize)]
pub struct ToolCall {
    /// The call's id.
    #[serde(default)]
    pub id: Option<String>,
    /// The function called.
    pub function: FunctionCall,
}

/// The function of a tool call.
#[derive(Debug, Deserialize)]
pub struct FunctionCall {
    /// Its name.
    pub name: String,
    /// Its arguments: a JSON document in a string.
    #[serde(default)]
    pub arguments: String,
}

/// One `data:` event of a streamed answer.
#[derive(Debug, Deserialize)]
pub struct ChatChunk {
    /// The candidates' deltas; switchboard reads the first.
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// The tokens the answer took, in a stream's last event when the server reports it.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// An error reported in the stream, after it began.
    #[serde(default)]
    pub error: Option<ApiError>,
}

/// One candidate's delta.
#[derive(Debug, Deserialize)]
pub struct ChunkChoice {
    /// What this event adds.
    #[serde(default)]
    pub delta: Delta,
}

/// What one event adds to the answer.
#[derive(Debug, Default, Deserialize)]
pub struct Delta {
    /// Text to append.
    #[serde(default)]
    pub content: Option<String>,
    /// Pieces of tool calls, by index.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A piece of a streamed tool call: the first carries its id and name, the following ones
/// more of its arguments.
#[derive(Debug, Deserialize)]
pub struct ToolCallDelta {
    /// Which call of the answer this continues.
    #[serde(default)]
    pub index: usize,
    /// The call's id (first piece).
    #[serde(default)]
    pub id: Option<String>,
    /// Name and arguments so far.
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

/// A piece of a streamed function call.
#[derive(Debug, Default, Deserialize)]
pub struct FunctionDelta {
    /// The name (first piece).
    #[serde(default)]
    pub name: Option<String>,
    /// More of the arguments.
    #[serde(default)]
    pub arguments: Option<String>,
}

/// The body of a refusal: `{"error": {...}}`.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ApiError,
}

/// The error object. Its `message` is the provider's own text and is never read.
#[derive(Debug, Deserialize)]
pub struct ApiError {
    /// The error class, e.g. `invalid_request_error`.
    #[serde(default, rename = "type")]
    pub kind: Option<Value>,
    /// A code, e.g. `model_not_found` or `"400"`.
    #[serde(default)]
    pub code: Option<Value>,
}
