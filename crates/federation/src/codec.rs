//! The protobuf codec of the generated service and client: prost's, except that a message that
//! does not decode is the caller's fault, `INVALID_ARGUMENT` (prost's codec says `INTERNAL`,
//! which would tell a fuzzing peer that the node failed, and tell an operator to look for a
//! bug that is not there).

use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// [`ProstCodec`] with decode errors mapped to `INVALID_ARGUMENT`.
#[derive(Debug, Clone, Default)]
pub struct StrictCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(self.0.decoder())
    }
}

/// [`ProstDecoder`] whose errors are `INVALID_ARGUMENT` with a short message.
#[derive(Debug, Clone)]
pub struct StrictDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| Status::invalid_argument(format!("malformed protobuf message: {}", s.message())))
    }

    fn buffer_settings(&self) -> tonic::codec::BufferSettings {
        self.0.buffer_settings()
    }
}
