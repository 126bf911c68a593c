//! Arrow columns in the schema of Spark's Kafka source: key, value, topic, partition, offset,
//! timestamp, timestampType and, when asked, headers.

use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, BinaryBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BinaryArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampMillisecondArray,
};
use arrow_buffer::{Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

fn header_item() -> Arc<Field> {
    Arc::new(Field::new(
        "element",
        DataType::Struct(header_fields()),
        false,
    ))
}

pub(crate) fn kafka_schema(include_headers: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("timestampType", DataType::Int32, false),
    ];
    if include_headers {
        fields.push(Field::new("headers", DataType::List(header_item()), true));
    }
    Arc::new(Schema::new(fields))
}

/// Kafka's timestamp types, as Spark's Kafka source reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime = 0,
    LogAppendTime = 1,
}

/// A binary column whose byte buffer can be sized up front (keys and values are most of what
/// a scan copies; growing by doubling would copy them again).
struct BinaryColumn {
    offsets: Vec<i32>,
    bytes: Vec<u8>,
    nulls: NullBufferBuilder,
}

impl BinaryColumn {
    fn new() -> BinaryColumn {
        BinaryColumn {
            offsets: vec![0],
            bytes: Vec::new(),
            nulls: NullBufferBuilder::new(0),
        }
    }

    fn push(&mut self, value: Option<&[u8]>) {
        match value {
            Some(value) => {
                self.bytes.extend_from_slice(value);
                self.nulls.append_non_null();
            }
            None => self.nulls.append_null(),
        }
        self.offsets.push(self.bytes.len() as i32);
    }

    fn finish(&mut self) -> BinaryArray {
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let bytes = std::mem::take(&mut self.bytes);
        BinaryArray::new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(bytes),
            self.nulls.finish(),
        )
    }
}

/// Headers collected as flat columns plus per-record list offsets; assembled at `finish`.
struct HeaderColumns {
    list_offsets: Vec<i32>,
    keys: StringBuilder,
    values: BinaryBuilder,
}

/// Rows of one partition being collected for the next record batch.
pub struct Columns {
    schema: SchemaRef,
    topic: Arc<str>,
    partition: i32,
    keys: BinaryColumn,
    values: BinaryColumn,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    timestamp_types: Vec<i32>,
    headers: Option<HeaderColumns>,
    /// Key, value and header bytes collected so far (batches are also cut by size).
    payload_bytes: usize,
}

impl Columns {
    pub fn new(topic: &str, partition: i32, include_headers: bool) -> Columns {
        Columns {
            schema: kafka_schema(include_headers),
            topic: topic.into(),
            partition,
            keys: BinaryColumn::new(),
            values: BinaryColumn::new(),
            offsets: Vec::new(),
            timestamps: Vec::new(),
            timestamp_types: Vec::new(),
            headers: include_headers.then(|| HeaderColumns {
                list_offsets: vec![0],
                keys: StringBuilder::new(),
                values: BinaryBuilder::new(),
            }),
            payload_bytes: 0,
        }
    }

    pub fn wants_headers(&self) -> bool {
        self.headers.is_some()
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    pub fn payload_bytes(&self) -> usize {
        self.payload_bytes
    }

    /// Makes room for `bytes` more of values, so a scan copies each value only once.
    pub fn reserve_values(&mut self, bytes: usize) {
        self.values.bytes.reserve_exact(bytes);
    }

    pub fn push_record(
        &mut self,
        offset: i64,
        timestamp: i64,
        timestamp_type: TimestampType,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) {
        self.keys.push(key);
        self.values.push(value);
        self.offsets.push(offset);
        self.timestamps.push(timestamp);
        self.timestamp_types.push(timestamp_type as i32);
        self.payload_bytes += key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
    }

    /// Adds a header to the record being collected (before or after its `push_record`); its
    /// `end_headers` closes the record's list.
    pub fn push_header(&mut self, key: &str, value: Option<&[u8]>) {
        if let Some(headers) = &mut self.headers {
            headers.keys.append_value(key);
            headers.values.append_option(value);
            self.payload_bytes += key.len() + value.map_or(0, <[u8]>::len);
        }
    }

    pub fn end_headers(&mut self) {
        if let Some(headers) = &mut self.headers {
            headers.list_offsets.push(headers.keys.len() as i32);
        }
    }

    /// The collected rows as one record batch; the columns start empty again.
    pub fn finish(&mut self) -> RecordBatch {
        let rows = self.offsets.len();
        let topic: StringArray = std::iter::repeat_n(Some(&*self.topic), rows).collect();
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
            Arc::new(topic),
            Arc::new(Int32Array::from_value(self.partition, rows)),
            Arc::new(Int64Array::from(std::mem::take(&mut self.offsets))),
            Arc::new(
                TimestampMillisecondArray::from(std::mem::take(&mut self.timestamps))
                    .with_timezone("UTC"),
            ),
            Arc::new(Int32Array::from(std::mem::take(&mut self.timestamp_types))),
        ];
        if let Some(headers) = &mut self.headers {
            let entries = StructArray::new(
                header_fields(),
                vec![
                    Arc::new(headers.keys.finish()) as ArrayRef,
                    Arc::new(headers.values.finish()),
                ],
                None,
            );
            let offsets = std::mem::replace(&mut headers.list_offsets, vec![0]);
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            columns.push(Arc::new(ListArray::new(
                header_item(),
                offsets,
                Arc::new(entries),
                None,
            )));
        }
        self.payload_bytes = 0;
        RecordBatch::try_new(self.schema.clone(), columns).expect("columns are built to the schema")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::Array;

    #[test]
    fn rows_and_headers_land_in_their_columns() {
        let mut columns = Columns::new("orders", 2, true);
        columns.push_record(10, 1_000, TimestampType::CreateTime, None, Some(b"v0"));
        columns.push_header("h", Some(b"x"));
        columns.push_header("empty", None);
        columns.end_headers();
        columns.push_record(11, 2_000, TimestampType::LogAppendTime, Some(b"k"), None);
        columns.end_headers();
        assert_eq!(columns.payload_bytes(), 2 + 1 + 1 + 1 + 5);
        let batch = columns.finish();
        assert_eq!(batch.schema(), kafka_schema(true));
        assert_eq!(batch.num_rows(), 2);
        assert!(batch.column(0).is_null(0));
        assert!(batch.column(1).is_null(1));
        assert_eq!(batch.column(2).as_string::<i32>().value(1), "orders");
        let headers = batch.column(7).as_list::<i32>();
        assert_eq!(headers.value_length(0), 2);
        assert_eq!(headers.value_length(1), 0);
        assert!(columns.is_empty());
        assert_eq!(columns.finish().num_rows(), 0);
    }
}
