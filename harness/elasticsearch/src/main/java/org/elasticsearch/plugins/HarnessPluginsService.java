package org.elasticsearch.plugins;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.elasticsearch.common.settings.Settings;

/**
 * A plugins service whose plugins are classes on the classpath (no plugin or module
 * directories, no plugin layers). It lives in Elasticsearch's own package because the record
 * it fills ({@code LoadedPlugin}) and the {@code plugins()} hook are package-private; the
 * server jar is not sealed. The Elasticsearch test framework's mock plugins service does the
 * same for its in-JVM nodes. The descriptor's fields differ between majors: each major's
 * {@code Descriptors} (src/major8, src/major9) builds it.
 */
public final class HarnessPluginsService extends PluginsService {

    private final List<LoadedPlugin> classpathPlugins;

    public HarnessPluginsService(Settings settings, Path configDir, Collection<Class<? extends Plugin>> classes) {
        super(settings, configDir, emptyLoader());
        final List<LoadedPlugin> loaded = new ArrayList<>();
        for (Class<? extends Plugin> c : classes) {
            final Plugin instance = loadPlugin(c, settings, configDir);
            loaded.add(new LoadedPlugin(Descriptors.of(c), instance, c.getClassLoader()));
        }
        loadExtensions(loaded);
        this.classpathPlugins = List.copyOf(loaded);
    }

    /**
     * A loader with no module or plugin bundles. Built with the package-private constructor:
     * the public factory inspects the server's module descriptor, which a server jar on the
     * plain classpath (an unnamed module) does not have.
     */
    public static PluginsLoader emptyLoader() {
        return new PluginsLoader(Set.of(), Set.of(), Map.of());
    }

    @Override
    protected List<LoadedPlugin> plugins() {
        return classpathPlugins;
    }
}
