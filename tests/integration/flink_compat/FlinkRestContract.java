/*
 * Millstream's test tool (not Flink code): reads Flink's REST contract out of an installed Flink
 * distribution's own classes, so that Millstream's REST answers are checked against the Flink
 * version whose CLI and dashboard talk to them.
 *
 *   java -cp flink-dist.jar:. FlinkRestContract schema   > contract.json
 *       every MessageHeaders of the distribution (method, URL template, status code) with a JSON
 *       Schema (2020-12) of its response body, derived with Jackson's own format visitors from
 *       the same ObjectMapper and classes Flink's REST handlers serialize with: each property
 *       Flink writes is required unless Flink leaves it out when null (@JsonInclude NON_NULL);
 *       null is allowed for every non-primitive (Jackson writes a null reference as null; which
 *       ones Flink's constructors refuse, the parse below finds); enums list Jackson's names;
 *       polymorphic types (@JsonTypeInfo) list their subtypes under their type property.
 *   java -cp flink-dist.jar:. FlinkRestContract parse responses.json
 *       each {"method", "url", "path", "body"} of the file parsed as Flink's RestClient parses a
 *       response (its strict ObjectMapper, the headers' response type); prints a line for each
 *       field Flink does not know (the strict mapper refuses them: all are listed, not only the
 *       first) and for each response that fails to parse otherwise.
 */

import org.apache.flink.runtime.rest.handler.RestHandlerSpecification;
import org.apache.flink.runtime.rest.messages.MessageHeaders;
import org.apache.flink.runtime.rest.util.RestMapperUtils;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.annotation.JsonTypeInfo;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.JsonParser;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.BeanProperty;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.DeserializationContext;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonDeserializer;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.deser.DeserializationProblemHandler;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JavaType;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonMappingException;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonSerializer;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.SerializationConfig;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.SerializerProvider;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.introspect.AnnotatedClass;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.introspect.AnnotatedClassResolver;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.jsonFormatVisitors.*;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.jsontype.NamedType;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.JsonNodeFactory;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ser.BeanPropertyWriter;

import java.io.File;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Enumeration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

public final class FlinkRestContract {

    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    private final ObjectMapper mapper = RestMapperUtils.getStrictObjectMapper();
    private final SerializerProvider provider = mapper.getSerializerProviderInstance();
    private final Map<String, ObjectNode> defs = new TreeMap<>();

    public static void main(String[] args) throws Exception {
        FlinkRestContract contract = new FlinkRestContract();
        List<MessageHeaders<?, ?, ?>> headers = allHeaders();
        if (args.length == 1 && args[0].equals("schema")) {
            System.out.println(contract.mapper.writerWithDefaultPrettyPrinter().writeValueAsString(contract.schemas(headers)));
        } else if (args.length == 2 && args[0].equals("parse")) {
            contract.parse(headers, new File(args[1]));
        } else {
            System.err.println("usage: FlinkRestContract schema | parse RESPONSES.json");
            System.exit(2);
        }
    }

    /** Every MessageHeaders singleton (static getInstance()) in the jars of the class path. */
    private static List<MessageHeaders<?, ?, ?>> allHeaders() throws Exception {
        List<MessageHeaders<?, ?, ?>> found = new ArrayList<>();
        for (String path : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (!path.endsWith(".jar")) {
                continue;
            }
            try (JarFile jar = new JarFile(path)) {
                for (Enumeration<JarEntry> e = jar.entries(); e.hasMoreElements(); ) {
                    String name = e.nextElement().getName();
                    if (!name.startsWith("org/apache/flink/") || !name.endsWith("Headers.class") || name.contains("$")) {
                        continue;
                    }
                    Class<?> cls;
                    try {
                        cls = Class.forName(name.replace('/', '.').replace(".class", ""), false,
                                FlinkRestContract.class.getClassLoader());
                    } catch (Throwable missing) {  // a class needing a jar not on the class path
                        continue;
                    }
                    if (!MessageHeaders.class.isAssignableFrom(cls) || cls.isInterface()
                            || Modifier.isAbstract(cls.getModifiers())) {
                        continue;
                    }
                    MessageHeaders<?, ?, ?> singleton = singleton(cls);
                    if (singleton != null) {
                        found.add(singleton);
                    }
                }
            }
        }
        return found;
    }

    /** The headers' instance: its static getInstance(), else a static field of its own type. */
    private static MessageHeaders<?, ?, ?> singleton(Class<?> cls) throws Exception {
        try {
            Method instance = cls.getMethod("getInstance");
            if (Modifier.isStatic(instance.getModifiers()) && instance.getParameterCount() == 0) {
                return (MessageHeaders<?, ?, ?>) instance.invoke(null);
            }
        } catch (NoSuchMethodException none) {
            // look for a field
        }
        for (Field field : cls.getDeclaredFields()) {
            if (Modifier.isStatic(field.getModifiers()) && field.getType() == cls) {
                field.setAccessible(true);
                return (MessageHeaders<?, ?, ?>) field.get(null);
            }
        }
        return null;  // built per use (with arguments): not part of the fixed API
    }

    private JavaType responseType(MessageHeaders<?, ?, ?> h) {
        Collection<Class<?>> parameters = h.getResponseTypeParameters();
        if (parameters == null || parameters.isEmpty()) {
            return mapper.constructType(h.getResponseClass());
        }
        return mapper.getTypeFactory().constructParametricType(h.getResponseClass(), parameters.toArray(new Class<?>[0]));
    }

    private ObjectNode schemas(List<MessageHeaders<?, ?, ?>> headers) throws Exception {
        ArrayNode endpoints = NODES.arrayNode();
        for (MessageHeaders<?, ?, ?> h : headers) {
            ObjectNode endpoint = endpoints.addObject();
            endpoint.put("method", h.getHttpMethod().name());
            endpoint.put("url", h.getTargetRestEndpointURL());
            endpoint.put("status", h.getResponseStatusCode().code());
            endpoint.put("headers", h.getClass().getName());
            endpoint.put("response", responseType(h).toCanonical());
            endpoint.set("schema", schemaOf(responseType(h), null));
        }
        ObjectNode root = NODES.objectNode();
        root.set("endpoints", endpoints);
        ObjectNode defsNode = root.putObject("$defs");
        defs.forEach(defsNode::set);
        return root;
    }

    private void parse(List<MessageHeaders<?, ?, ?>> headers, File file) throws Exception {
        List<String> unknown = new ArrayList<>();
        ObjectMapper lenient = mapper.copy();  // the strict mapper, but noting unknown fields and going on
        lenient.addHandler(new DeserializationProblemHandler() {
            @Override
            public boolean handleUnknownProperty(DeserializationContext context, JsonParser parser,
                    JsonDeserializer<?> deserializer, Object bean, String name) throws java.io.IOException {
                unknown.add(name + " (" + (bean != null ? bean.getClass().getName() : "?") + ")");
                parser.skipChildren();
                return true;
            }
        });
        int failures = 0;
        for (JsonNode response : mapper.readTree(file)) {
            String method = response.get("method").asText();
            String url = response.get("url").asText();
            MessageHeaders<?, ?, ?> match = null;
            for (MessageHeaders<?, ?, ?> h : headers) {
                if (h.getHttpMethod().name().equals(method) && h.getTargetRestEndpointURL().equals(url)) {
                    match = h;
                }
            }
            if (match == null) {
                System.out.println(method + " " + url + ": no such Flink REST path");
                failures++;
                continue;
            }
            unknown.clear();
            try {
                lenient.readerFor(responseType(match)).readValue(response.get("body"));
                for (String field : unknown) {
                    System.out.println(method + " " + url + " (" + response.get("path").asText()
                            + "): a field Flink does not know: " + field);
                    failures++;
                }
            } catch (Exception e) {
                System.out.println(method + " " + url + " (" + response.get("path").asText() + "): "
                        + e.getMessage().replace('\n', ' '));
                failures++;
            }
        }
        System.exit(failures == 0 ? 0 : 1);
    }

    // ---- JSON Schema from Jackson's format visitors -----------------------------------------

    private ObjectNode schemaOf(JavaType type, JsonFormatVisitable serializer) throws JsonMappingException {
        JsonTypeInfo typeInfo = type.getRawClass().getAnnotation(JsonTypeInfo.class);
        if (typeInfo != null && typeInfo.include() == JsonTypeInfo.As.PROPERTY) {
            return polymorphic(type, typeInfo.property().isEmpty() ? typeInfo.use().getDefaultPropertyName()
                    : typeInfo.property());
        }
        JsonFormatVisitable visitable = serializer;
        if (visitable == null) {
            visitable = provider.findValueSerializer(type);
        }
        Visitor visitor = new Visitor(type);
        visitable.acceptJsonFormatVisitor(visitor, type);
        return visitor.schema;
    }

    /** A type written with its subtype's name in ``property``: one branch per named subtype. */
    private ObjectNode polymorphic(JavaType base, String property) throws JsonMappingException {
        SerializationConfig config = mapper.getSerializationConfig();
        AnnotatedClass annotated = AnnotatedClassResolver.resolveWithoutSuperTypes(config, base.getRawClass());
        ObjectNode schema = NODES.objectNode();
        schema.put("type", "object");
        schema.putArray("required").add(property);
        ArrayNode names = schema.putObject("properties").putObject(property).putArray("enum");
        ArrayNode branches = schema.putArray("allOf");
        for (NamedType subtype : mapper.getSubtypeResolver().collectAndResolveSubtypesByClass(config, annotated)) {
            if (!subtype.hasName() || Modifier.isAbstract(subtype.getType().getModifiers())) {
                continue;
            }
            names.add(subtype.getName());
            ObjectNode branch = branches.addObject();
            branch.putObject("if").putObject("properties").putObject(property).put("const", subtype.getName());
            JavaType concrete = mapper.constructType(subtype.getType());
            Visitor visitor = new Visitor(concrete);
            provider.findValueSerializer(concrete).acceptJsonFormatVisitor(visitor, concrete);
            branch.set("then", visitor.schema);
        }
        return schema;
    }

    private static boolean nullable(BeanProperty property) {
        if (property.getType().isPrimitive()) {
            return false;
        }
        // left out rather than written as null
        return !(property instanceof BeanPropertyWriter && ((BeanPropertyWriter) property).willSuppressNulls());
    }

    private final class Visitor extends JsonFormatVisitorWrapper.Base {
        private final JavaType type;
        private ObjectNode schema = NODES.objectNode();  // {} until a format is announced: any value

        Visitor(JavaType type) {
            super(provider);
            this.type = type;
        }

        @Override
        public JsonObjectFormatVisitor expectObjectFormat(JavaType t) {
            String name = t.toCanonical();
            schema = NODES.objectNode();
            schema.put("$ref", "#/$defs/" + name);
            if (defs.containsKey(name)) {
                return null;  // already (being) described: its properties are not visited again
            }
            ObjectNode def = NODES.objectNode();
            def.put("type", "object");
            ObjectNode properties = def.putObject("properties");
            ArrayNode required = def.putArray("required");
            defs.put(name, def);
            return new JsonObjectFormatVisitor.Base(provider) {
                @Override
                public void property(BeanProperty p) throws JsonMappingException {
                    add(p, true);
                }

                @Override
                public void optionalProperty(BeanProperty p) throws JsonMappingException {
                    add(p, true);
                }

                private void add(BeanProperty p, boolean always) throws JsonMappingException {
                    JsonFormatVisitable own = null;
                    if (p instanceof BeanPropertyWriter && ((BeanPropertyWriter) p).hasSerializer()) {
                        own = ((BeanPropertyWriter) p).getSerializer();
                    }
                    ObjectNode value = own != null ? schemaOf(p.getType(), own) : schemaOf(p.getType(), null);
                    if (nullable(p)) {
                        ObjectNode either = NODES.objectNode();
                        either.putArray("anyOf").add(value).addObject().put("type", "null");
                        value = either;
                    }
                    properties.set(p.getName(), value);
                    boolean leftOutWhenNull = p instanceof BeanPropertyWriter && ((BeanPropertyWriter) p).willSuppressNulls();
                    if (!leftOutWhenNull) {
                        required.add(p.getName());
                    }
                }
            };
        }

        @Override
        public JsonArrayFormatVisitor expectArrayFormat(JavaType t) {
            schema = NODES.objectNode();
            schema.put("type", "array");
            return new JsonArrayFormatVisitor.Base(provider) {
                @Override
                public void itemsFormat(JsonFormatVisitable handler, JavaType element) throws JsonMappingException {
                    schema.set("items", schemaOf(element, handler instanceof JsonSerializer ? handler : null));
                }

                @Override
                public void itemsFormat(JsonFormatTypes format) {
                    schema.putObject("items").put("type", format.value());
                }
            };
        }

        @Override
        public JsonMapFormatVisitor expectMapFormat(JavaType t) {
            schema = NODES.objectNode();
            schema.put("type", "object");
            return new JsonMapFormatVisitor.Base(provider) {
                @Override
                public void valueFormat(JsonFormatVisitable handler, JavaType value) throws JsonMappingException {
                    schema.set("additionalProperties", schemaOf(value, handler instanceof JsonSerializer ? handler : null));
                }
            };
        }

        @Override
        public JsonStringFormatVisitor expectStringFormat(JavaType t) {
            schema = NODES.objectNode();
            schema.put("type", "string");
            return new JsonStringFormatVisitor.Base() {
                @Override
                public void enumTypes(java.util.Set<String> names) {
                    ArrayNode values = schema.putArray("enum");
                    new java.util.TreeSet<>(names).forEach(values::add);
                }
            };
        }

        @Override
        public JsonIntegerFormatVisitor expectIntegerFormat(JavaType t) {
            schema = NODES.objectNode();
            schema.put("type", "integer");
            return null;
        }

        @Override
        public JsonNumberFormatVisitor expectNumberFormat(JavaType t) {
            schema = NODES.objectNode();
            schema.put("type", "number");
            return null;
        }

        @Override
        public JsonBooleanFormatVisitor expectBooleanFormat(JavaType t) {
            schema = NODES.objectNode();
            schema.put("type", "boolean");
            return null;
        }

        @Override
        public JsonNullFormatVisitor expectNullFormat(JavaType t) {
            schema = NODES.objectNode();
            schema.put("type", "null");
            return null;
        }

        @Override
        public JsonAnyFormatVisitor expectAnyFormat(JavaType t) {
            schema = NODES.objectNode();  // a custom serializer: Flink does not describe what it writes
            schema.put("x-custom-serializer", t.toCanonical());
            return null;
        }
    }
}
